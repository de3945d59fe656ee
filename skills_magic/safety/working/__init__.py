"""The working folder a sandboxed run sees copy-on-write: what the run changed, its run folder, and applying its changes into the project without being led outside it."""
