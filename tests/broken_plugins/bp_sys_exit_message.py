"""Broken on purpose: importing it calls sys.exit with a message, as a script refusing to run does."""

import sys

sys.exit("this plugin needs a GPU")
