"""Quality of what was generated: cheap signals per completion (``signals``, written with the record), the corpus
view of them (``corpus``: ``tokenmill inspect``, the report's section, ``export --drop``), and choosing prompts
to answer again (``regenerate``)."""
