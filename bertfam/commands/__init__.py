"""Sub-command registrations for the CLI: each module defines register(subparsers)."""
