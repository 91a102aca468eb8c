"""The studies: each a Config dataclass and a run() giving tidy rows, figures and a summary."""
