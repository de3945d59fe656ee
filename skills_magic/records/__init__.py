"""What lasts after a run: the SQLite database (migrations, append-only audit) and the experiment ledger."""
