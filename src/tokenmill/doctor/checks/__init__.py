"""The doctor's checks, by family (availability, client, corpus, pools, roofline), over the signs they share."""
