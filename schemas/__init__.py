"""The wire contract: messages, subjects and their codec; JSON Schemas generated from them."""
