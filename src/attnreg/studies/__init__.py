"""The studies: each a package whose light ``__init__`` exports ``SPEC``
(:class:`~attnreg.studies.spec.StudySpec`: a config dataclass that checks its values, the
quick and full profiles, and a runner ``run(config, progress)`` giving tidy rows, figures and a
summary), listed in :mod:`attnreg.studies.registry`."""
