"""The web console (C1–C4): sign-in, sessions and the pages that edit connections, bridges and graphs."""
