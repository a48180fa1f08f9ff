"""rule"""
