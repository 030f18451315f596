"""How a check's result shows in a notebook: its one-line summary, then its anomalies."""

from __future__ import annotations

import html

import pandas as pd


class ShownResult:
    """Mixed into each workload's result dataclass (declared ``repr=False``, so this repr
    stays): ``repr`` is the summary line, the HTML adds the anomalies' table when there are any
    (client content as text: pandas escapes the cells, the summary is escaped here)."""

    anomalies: pd.DataFrame

    @property
    def summary(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.summary})"

    def _repr_html_(self) -> str:
        table = self.anomalies.to_html(index=False) if len(self.anomalies) else ""
        return f"<p>{html.escape(self.summary)}</p>{table}"
