"""Bundled hardware profiles (installed as the package ``solverfuse.profiles``)."""
