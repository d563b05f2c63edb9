"""The package version, in one place: hatch reads it for the build, the CLI for --version."""

__version__ = "0.1.0"
