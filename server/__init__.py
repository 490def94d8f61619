"""`spsim serve`: the runtime behind an OpenAI-compatible HTTP endpoint (the top of the house:
it imports the runtime; nothing imports it)."""
