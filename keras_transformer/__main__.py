"""`python -m keras_transformer COMMAND ...` runs the command line."""

import sys

from keras_transformer.cli import main

sys.exit(main())
