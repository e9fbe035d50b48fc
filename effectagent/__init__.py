"""effectagent: a Trio-native runtime for LLM agents, built on a small effect system."""
