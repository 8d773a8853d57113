"""Starting and stopping servers on this machine."""
