"""The run file as a durable record: where it goes and how it is written without losing
anything (:mod:`~distfl.record.output`), and the integrity record that lets a reader trust
every part of it (:mod:`~distfl.record.integrity`)."""
