"""A long-lived runtime stays flat: retention of the in-memory log, and what finished runs leave."""
