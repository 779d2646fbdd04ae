"""Who takes part in a round: client resources, availability, dropouts and selection strategies."""
