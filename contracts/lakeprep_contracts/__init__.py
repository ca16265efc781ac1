"""lakeprep's contracts: the facts that Airflow, the Spark jobs and the trainer share.

Each runtime imports this package and none imports another runtime's code: the lake
layout and file names (`layout`), every stage's knobs (`knobs`), and the JSON Schemas of
the documents passed between runtimes (`documents`: manifest, transform, statistics, drift).
It ships inside the Spark jobs zip and beside the trainer. Standard library plus
`jsonschema` only.
"""
