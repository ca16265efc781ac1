"""`python -m benchmarks [--quick] [--rows N ...] [--reps R] [--only PART ...]` (see run.py)."""

from benchmarks.environment import put_sources_on_path

# This checkout's sources first, before anything imports lakeprep: an editable install in the
# venv would otherwise resolve them to the checkout the venv was made in.
put_sources_on_path()

from benchmarks.run import main  # noqa: E402

main()
