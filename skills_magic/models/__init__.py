"""Model clients behind one small protocol (`base.ModelClient`): the real Anthropic SDK, a scripted model for
offline teaching and tests, and record/replay cassettes. Each is imported only when chosen."""
