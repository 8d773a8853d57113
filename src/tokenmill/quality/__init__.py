"""Quality of what was generated: the signals' table (``registry``), cheap signals per completion (``signals``,
written with the record), a record's quality and the selectors it matches (``records``), the corpus view of them
(``corpus``: ``tokenmill inspect``, the report's section, ``export --drop``), and choosing prompts to answer again
(``regenerate``)."""
