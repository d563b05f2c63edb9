"""The coordinator's machinery, private: one job per module (see each module's docstring)."""
