"""The actions a user asks for (compare, cast, redact, index), above the per-file analysis (`indexer`): the CLI and the
web app reach the analysis through them only (import-linter's contract in pyproject.toml)."""
