"""The tool's hand on hosts: pyinfra facts and operations, fabric for long ad-hoc commands."""
