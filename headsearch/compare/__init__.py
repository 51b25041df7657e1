"""Is it still the same person, in the same look? A video's sampled frames, analysed as `index` analyses them, scored
against a reference person (photos, a clip's main person, or a person of a library): per frame its tier, runs of
one tier (segments), drift events, a summary and a verdict; and the reports of them (text, JSON, HTML, CSV).

`reference` makes the templates, `timeline` scores an analysed video against them, `report` shows the result. The
analysis itself is the indexer's (`actions.compare`), since the core does not decode videos."""
