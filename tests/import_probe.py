"""An otherwise unused module: the background-import tests import it and look for it."""
