"""kvtune dashboard, the Streamlit entry point: lays out the pages and the shared sidebar.

Start it with `kvtune dashboard [--results DIR] [--storage URL]` (dashboard/launch.py), which runs
`streamlit run` on this file. Each page is a script under dashboard/views/ (not pages/: Streamlit
also serves a folder called pages/ on its own, bypassing this navigation and its sidebar). Loading
is in dashboard/data.py, figures in dashboard/charts.py.
"""

import sys
from pathlib import Path

try:
    import kvtune.dashboard  # noqa: F401 - installed (pip install -e .)
except (
    ModuleNotFoundError
):  # `streamlit run dashboard/app.py` from a checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import streamlit as st

from kvtune.dashboard import selection

PAGE_FAILED = "This page could not be drawn"

st.set_page_config(page_title="kvtune dashboard", layout="wide")
navigation = st.navigation(
    [
        st.Page("views/runs.py", title="Runs", default=True),
        st.Page("views/latency.py", title="Latency vs batch size"),
        st.Page("views/study.py", title="Study"),
        st.Page("views/timeline.py", title="SM timeline"),
        st.Page("views/export.py", title="Export"),
        st.Page("views/hybrid.py", title="Hybrid batches"),
    ]
)
selection.sidebar()
try:
    navigation.run()
except Exception as exc:  # noqa: BLE001 - the last guard: a page shows a message, never a traceback
    import traceback

    traceback.print_exc()  # the full story goes to the server's log
    st.error(f"{PAGE_FAILED}: {' '.join(f'{type(exc).__name__}: {exc}'.split())[:500]}")
