"""kopf handlers: thin, they read state, call policy, and write objects."""
