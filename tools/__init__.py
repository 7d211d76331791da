"""Tools for working on the project from its repository: not part of the installed package.

Run them from the repository's root (``python -m tools.NAME``, which puts the root first on
``sys.path``). This file makes ``tools`` a regular package: a folder without it would be a namespace
package, which a top-level ``tools`` that some installed distribution brings would take precedence over.
"""
