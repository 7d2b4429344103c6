"""Packages of the installed `rabbitmq_retry`: components/ and every subpackage in it, found when built;
and the client package `rabbitmq_retry_client` (no subpackages).

pyproject.toml maps `rabbitmq_retry` to components/; its static `packages` list cannot name subpackages it
has not been told about, so they are found here instead (a new subpackage needs no edit)."""

from setuptools import find_packages, setup

setup(packages=["rabbitmq_retry", *(f"rabbitmq_retry.{name}" for name in find_packages("components")),
                "rabbitmq_retry_client"])
