"""Quality of what was generated: cheap signals per completion (written with the record), and the corpus view
of them (``tokenmill inspect``). ``signals`` computes them; ``corpus`` reads an output back and sums them up."""
