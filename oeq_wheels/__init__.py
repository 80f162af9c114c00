"""oeq-wheels: build verified fastmace-oeq-ext wheels of OpenEquivariance's host extension."""

__version__ = "0.1.0"
