// The browser half of MessageBrowser (browser.py): a form, pager buttons and a table of records.
//
// Python holds every piece of state (the query, the page, the rows) and does every read; this
// module draws the synced traits and sends back what the user asked for. Keys, values, header
// names and values come from clients: they reach the page as text (textContent, text nodes,
// input values), never as innerHTML or markup built from strings.

const FILTERS = [
  // [query field, label, placeholder, input type]
  ["key", "key", "whole key", "text"],
  ["value_contains", "value contains", "text", "text"],
  ["header", "header", "name or name=value", "text"],
  ["since", "since (UTC)", "", "datetime-local"],
  ["until", "until (UTC)", "", "datetime-local"],
];
const MOVES = [["first", "« first"], ["previous", "‹ previous"], ["next", "next ›"],
  ["last", "last »"]];

function el_(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function field(label, input) {
  return el_("label", { class: "pylog-browse-field" }, [el_("span", {}, [label]), input]);
}

// datetime-local wants "YYYY-MM-DDTHH:MM:SS"; Python accepts that or "YYYY-MM-DD HH:MM:SS"
function asLocalInput(text) {
  return text ? String(text).replace(" ", "T").slice(0, 19) : "";
}

function buildForm(model, send) {
  const inputs = {
    partition: el_("select", { "aria-label": "partition" }),
    offset: el_("input", { type: "text", size: 10, "aria-label": "offset",
      title: "an offset, earliest, latest, or a negative number (back from the end)" }),
    count: el_("input", { type: "number", min: 1, step: 1, style: "width: 5em",
      "aria-label": "count" }),
  };
  for (const [name, label, placeholder, type] of FILTERS) {
    inputs[name] = el_("input", { type, placeholder, "aria-label": label,
      ...(type === "datetime-local" ? { step: 1 } : {}) });
  }
  const go = el_("button", { type: "submit", class: "pylog-browse-go" }, ["show"]);
  const clear = el_("button", { type: "button" }, ["clear filters"]);
  const form = el_("form", { class: "pylog-browse-form" }, [
    field("partition", inputs.partition), field("offset", inputs.offset),
    field("count", inputs.count),
    FILTERS.map(([name, label]) => field(label, inputs[name])), go, clear,
  ]);
  const query = () => Object.fromEntries(Object.entries(inputs).map(([n, i]) => [n, i.value]));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send({ type: "query", ...query() });
  });
  clear.addEventListener("click", () => {
    for (const [name] of FILTERS) inputs[name].value = "";
    send({ type: "query", ...query() });
  });
  return { form, inputs };
}

function fillForm(model, inputs) {
  const query = model.get("query") || {};
  const count = model.get("partitions") || 1;
  if (inputs.partition.options.length !== count) {
    inputs.partition.replaceChildren(
      ...Array.from({ length: count }, (_, index) => el_("option", { value: index }, [index])));
  }
  inputs.partition.value = String(query.partition ?? 0);
  inputs.offset.value = String(query.offset ?? "");
  inputs.count.value = String(query.count ?? "");
  for (const [name, , , type] of FILTERS) {
    const value = query[name] ?? "";
    inputs[name].value = type === "datetime-local" ? asLocalInput(value) : String(value);
  }
}

function buildPager(send) {
  const buttons = {};
  const keepName = el_("input", { type: "text", size: 10, value: "browsed",
    "aria-label": "DataFrame name" });
  const keep = el_("button", { type: "button", class: "pylog-browse-keep",
    title: "put the records shown into the notebook as a pandas DataFrame" }, ["as DataFrame"]);
  keep.addEventListener("click", () => send({ type: "keep", name: keepName.value }));
  for (const [to, label] of MOVES) {
    buttons[to] = el_("button", { type: "button", "data-to": to }, [label]);
    buttons[to].addEventListener("click", () => send({ type: "page", to }));
  }
  const where = el_("span", { class: "pylog-browse-where" });
  const pager = el_("div", { class: "pylog-browse-pager" },
    [MOVES.map(([to]) => buttons[to]), where, el_("span", { class: "pylog-browse-spacer" }),
      keepName, keep]);
  return { pager, buttons, where };
}

function describePage(model) {
  const page = model.get("page") || {};
  const rows = model.get("rows") || [];
  if (page.start === undefined) return "";
  const range = page.high > page.low ? `offsets ${page.low} to ${page.high - 1}` : "empty";
  const scanned = page.scanned !== rows.length ? `, ${page.scanned} scanned` : "";
  const read = page.next > page.start ? `${page.start} to ${page.next - 1}` : `${page.start}`;
  return `${rows.length} records (read ${read}${scanned}) of ${range}`;
}

function cell(text, className) {
  const td = el_("td", className ? { class: className } : {});
  if (text === null || text === undefined) {
    td.append(el_("span", { class: "pylog-browse-null" }, ["null"]));
  } else {
    td.textContent = String(text);
  }
  return td;
}

function headersCell(headers) {
  const td = el_("td", { class: "pylog-browse-headers" });
  for (const [name, value] of headers || []) {
    const item = el_("div", {}, [el_("b", {}, [String(name)]), ": "]);
    item.append(value === null ? el_("span", { class: "pylog-browse-null" }, ["null"])
      : document.createTextNode(String(value)));
    td.append(item);
  }
  return td;
}

function recordRow(row) {
  const value = cell(row.value, `pylog-browse-value pylog-browse-${row.format || "null"}`);
  if (row.format === "hex" || row.format === "json") value.title = row.format;
  const key = cell(row.key, `pylog-browse-key pylog-browse-${row.key_format || "null"}`);
  if (row.key_format === "hex") key.title = "hex";
  return el_("tr", {}, [cell(row.offset, "pylog-browse-offset"), cell(row.timestamp), key,
    value, headersCell(row.headers)]);
}

function render({ model, el }) {
  const root = el_("div", { class: "pylog-browse" });
  const pending = el_("span", { class: "pylog-browse-pending" });
  const send = (message) => {
    pending.textContent = "reading…"; // until the answer (while a cell runs: until it ends)
    model.send(message);
  };
  const title = el_("div", { class: "pylog-browse-title" });
  const { form, inputs } = buildForm(model, send);
  const { pager, buttons, where } = buildPager(send);
  const error = el_("div", { class: "pylog-browse-error", role: "alert" });
  const note = el_("div", { class: "pylog-browse-note" });
  const body = el_("tbody");
  const table = el_("table", { class: "pylog-browse-table" }, [
    el_("thead", {}, [el_("tr", {}, ["offset", "timestamp (UTC)", "key", "value", "headers"]
      .map((name) => el_("th", {}, [name])))]), body]);
  root.append(title, form, pager, error, note, el_("div", { class: "pylog-browse-scroll" },
    [table]));
  el.append(root);

  const draw = () => {
    pending.textContent = "";
    title.replaceChildren(el_("b", {}, [model.get("topic")]), " — partition ",
      String((model.get("query") || {}).partition ?? 0), " ", pending);
    fillForm(model, inputs);
    const page = model.get("page") || {};
    buttons.first.disabled = buttons.previous.disabled = !page.has_previous;
    buttons.next.disabled = buttons.last.disabled = !page.has_next;
    where.textContent = describePage(model);
    error.textContent = model.get("error") || "";
    note.textContent = model.get("note") || "";
    const rows = model.get("rows") || [];
    body.replaceChildren(...(rows.length ? rows.map(recordRow)
      : [el_("tr", {}, [el_("td", { colspan: 5, class: "pylog-browse-empty" },
        ["no records here"])])]));
  };
  const names = ["query", "rows", "page", "error", "note", "partitions", "topic"];
  for (const name of names) model.on(`change:${name}`, draw);
  draw();
  return () => { for (const name of names) model.off(`change:${name}`, draw); };
}

export default { render };
