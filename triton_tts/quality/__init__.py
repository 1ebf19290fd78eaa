"""Quality gates: speech recognisers (``intelligibility``), the held-out gate sentences
(``gate_texts``) and the speaker gate over a running server (``speaker_gate``)."""
