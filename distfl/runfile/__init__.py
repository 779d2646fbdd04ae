"""The run file: the product's durable record, in one package.

- :mod:`~distfl.runfile.layout`: what a run file holds, declared once (groups, datasets,
  tables and their columns); ``python -m distfl.runfile.layout`` prints it;
- :mod:`~distfl.runfile.atomic`: writing without losing anything (a temporary file, fsync,
  rename; the disk's room reserved before a write);
- :mod:`~distfl.runfile.output`: where a run file may go (refusals of odd or foreign
  paths), the output lock against a second writer, the traceback kept beside a run;
- :mod:`~distfl.runfile.integrity`: the integrity record that lets a reader trust every
  part;
- :mod:`~distfl.runfile.contents` (with :mod:`~distfl.runfile.table_checks` and
  :mod:`~distfl.runfile.state_checks`) and :mod:`~distfl.runfile.tables`: what a file's
  parts must hold, checked against its config, and the tables read back;
- :mod:`~distfl.runfile.writer`: writing a round's checkpoint, the whole file at once;
- :mod:`~distfl.runfile.reader`: reading a run file back
  (:class:`~distfl.runfile.reader.RunFile`, what a resume restores), refusing a corrupt or
  mismatched one (:mod:`~distfl.runfile.checkpoint` is both under the name earlier code
  imported them by);
- :mod:`~distfl.runfile.run`: the one read-side model, :class:`~distfl.runfile.run.Run`,
  through which every reader (``inspect``, ``status``, ``gather``, ``report``,
  ``distfl.open``) sees a run.
"""
