"""Tests that apply the program to real RabbitMQ brokers through tests/support/mirror.py."""
