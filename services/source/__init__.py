"""The source service: follows Git repositories and publishes each new commit as a bundle."""
