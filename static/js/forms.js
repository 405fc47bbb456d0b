// A form whose text is over what the server reads from one post (DATA_UPLOAD_MAX_MEMORY_SIZE, on <body
// data-post-limit>) is not sent: the server would refuse it whole, and the page it answers with replaces the form and
// what was typed in it (an htmx form's text would stay, with nothing shown). The form stays as it is, with a sentence
// naming both sizes. File fields are not counted: the server reads their data apart from the limit.
(function () {
  "use strict";
  var limit = Number(document.body.getAttribute("data-post-limit") || 0);
  if (!limit || typeof FormData === "undefined" || typeof TextEncoder === "undefined") return;
  var encoder = new TextEncoder();

  function isPost(form) {
    return (form.getAttribute("method") || "").toLowerCase() === "post" || form.hasAttribute("hx-post");
  }

  // The size of the body the browser would send, files left out: form-urlencoded grows each byte that is not
  // plain to three; multipart adds a boundary and headers (about a hundred bytes) a field.
  function postBytes(form, submitter) {
    var data = submitter ? new FormData(form, submitter) : new FormData(form);
    var multipart = (form.getAttribute("enctype") || "").toLowerCase() === "multipart/form-data";
    var strings = [];
    data.forEach(function (value, name) { if (typeof value === "string") strings.push([name, value]); });
    if (!multipart) return new URLSearchParams(strings).toString().length;
    return strings.reduce(function (total, pair) {
      return total + encoder.encode(pair[0]).length + encoder.encode(pair[1]).length + 100;
    }, 0);
  }

  function kib(bytes) { return Math.ceil(bytes / 1024).toLocaleString("en") + " KiB"; }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !isPost(form)) return;
    var shown = form.querySelector("[data-post-too-large]");
    var bytes = postBytes(form, event.submitter);
    if (bytes <= limit) {
      if (shown) shown.remove();
      return;
    }
    // capture phase, on the document: before htmx's own listener on the form, which then never sends it
    event.preventDefault();
    event.stopPropagation();
    event.stopImmediatePropagation();
    if (!shown) {
      shown = document.createElement("p");
      shown.className = "msg error";
      shown.setAttribute("role", "alert");
      shown.setAttribute("data-post-too-large", "");
      form.insertBefore(shown, form.firstChild);
    }
    shown.textContent = "Not sent: this form holds about " + kib(bytes) + " of text, more than the " + kib(limit) +
      " KernelLab reads from one form. What you typed is still here: shorten it, or attach the text as a file " +
      "where the form has a file field.";
    shown.scrollIntoView({block: "nearest"});
  }, true);
})();
