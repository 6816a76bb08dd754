// toy-agent report: sorting and filtering of the tables. The page reads the same without it.
// Only textContent and DOM properties are written here: no HTML is built from the data.
"use strict";
(function () {
  function value(row, index, numeric) {
    var cell = row.cells[index];
    if (!cell) return numeric ? -Infinity : "";
    var text = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent;
    if (!numeric) return text.trim().toLowerCase();
    var number = parseFloat(text);
    return isNaN(number) ? -Infinity : number;
  }

  function sortable(table) {
    var body = table.tBodies[0];
    var heads = table.querySelectorAll("thead th[data-sort]");
    Array.prototype.forEach.call(heads, function (th) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "sort";
      while (th.firstChild) button.appendChild(th.firstChild);
      th.appendChild(button);
      button.addEventListener("click", function () {
        var index = th.cellIndex;
        var numeric = th.getAttribute("data-sort") === "num";
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (other) {
          other.removeAttribute("aria-sort");
        });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var keyed = Array.prototype.map.call(body.rows, function (row, at) {
          return { row: row, key: value(row, index, numeric), at: at };
        });
        keyed.sort(function (a, b) {
          var order = a.key < b.key ? -1 : a.key > b.key ? 1 : a.at - b.at;
          return ascending ? order : -order;
        });
        var fragment = document.createDocumentFragment();
        keyed.forEach(function (item) { fragment.appendChild(item.row); });
        body.appendChild(fragment);
      });
    });
  }

  function filterable(table) {
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var groups = [];
    rows.forEach(function (row) {
      var group = row.getAttribute("data-group") || "";
      if (groups.indexOf(group) < 0) groups.push(group);
    });
    groups.sort();
    var label = document.createElement("label");
    label.className = "filter";
    label.appendChild(document.createTextNode("show " + table.getAttribute("data-filter")));
    var select = document.createElement("select");
    [""].concat(groups).forEach(function (group) {
      var option = document.createElement("option");
      option.value = group;
      option.textContent = group === "" ? "all" : group;
      select.appendChild(option);
    });
    var shown = document.createElement("span");
    shown.className = "shown";
    function apply() {
      var count = 0;
      rows.forEach(function (row) {
        var hide = select.value !== "" && row.getAttribute("data-group") !== select.value;
        row.hidden = hide;
        if (!hide) count += 1;
      });
      shown.textContent = count + " of " + rows.length + " shown";
    }
    select.addEventListener("change", apply);
    label.appendChild(select);
    label.appendChild(shown);
    table.parentNode.insertBefore(label, table);
    apply();
  }

  // A run page of a batch comes as the text of a <noscript> (see the template): the page's
  // own markup, every value in it escaped when the page was written. It becomes the page
  // when the address names it, or something in it (a step: #run-3-s5).
  var pages = Array.prototype.slice.call(document.querySelectorAll("section.page"));

  function expand(page) {
    var lazy = page.querySelector(":scope > noscript.lazy");
    if (!lazy) return false;
    var template = document.createElement("template");
    template.innerHTML = lazy.textContent;
    page.replaceChild(template.content, lazy);
    return true;
  }

  function route() {
    var id = location.hash.slice(1);
    if (!id) return;
    var page = pages.filter(function (p) {
      return id === p.id || id.indexOf(p.id + "-") === 0;
    })[0];
    if (page && expand(page) && id !== page.id) {
      history.replaceState(null, "", "#");
      location.replace("#" + id);  // the step exists now: make it the :target
    }
  }

  window.addEventListener("hashchange", route);
  route();
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), sortable);
  Array.prototype.forEach.call(document.querySelectorAll("table[data-filter]"), filterable);
  var root = document.documentElement;
  root.setAttribute("data-ready-ms", String(Math.round(performance.now())));  // see bench/
  root.setAttribute("data-ready", "1");
})();
