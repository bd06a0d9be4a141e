"""The kit the apps and the service's outer parts build on: HTTP, settings, CLI output, TLS, SQL blocks."""
