"""The Jupyter front end: magics that parse a line and call the session, views that render values, live widgets. The only part that imports IPython or ipywidgets."""
