"""Selection strategies (``participation.selection``): how the clients of a draw are chosen
among the available ones. The interface is :mod:`~distfl.participation.selection.base`; each
other module is one strategy, registered by name (:data:`distfl.plugins.SELECTIONS`), and a
strategy of one's own registers when its module is imported (``run.plugins``)."""
