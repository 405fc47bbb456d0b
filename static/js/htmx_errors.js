// A request htmx makes that fails says so. htmx swaps no 4xx or 5xx answer (its responseHandling) and shows nothing
// when the server cannot be reached, so a comment posted after the poster lost access to the run, a Pause refused by
// the CSRF check or a post too large for the server would change nothing on the page and say nothing. Each such
// request gets one sentence under the element that made it (the form, the link, the part of the panel that refreshes
// itself), or inside the element it was aimed at when a script made it; nothing else on the page changes, so what
// was typed stays where it was. The sentence is the server's own where its answer shows one (role="alert", as the
// panel's and the members page's refusals do), else one for the status. The next request from the same element that
// succeeds takes the sentence away. An answer with HX-Redirect (an ended session: kernellab/views/htmx_login.py)
// is htmx's to follow, and the explorer's own fetches (static/js/explorer.js) are not htmx's: neither comes here.
(function () {
  "use strict";
  var shown = new WeakMap();  // the element a sentence is about -> the sentence's element

  function kib(bytes) { return Math.ceil(bytes / 1024).toLocaleString("en") + " KiB"; }

  function tooLarge() {
    var limit = Number(document.body.getAttribute("data-post-limit") || 0);
    return limit
      ? "Not saved: this was more than the " + kib(limit) + " KernelLab reads from one form; shorten the text and send it again."
      : "Not saved: this was more than KernelLab reads from one form; shorten the text and send it again.";
  }

  function statusSentence(status) {
    if (status === 401) return "Your session has ended: reload the page to log in again.";
    if (status === 403) return "Your session changed: reload the page.";
    if (status === 404) return "You no longer have access to this: reload the page.";
    if (status === 413) return tooLarge();
    if (status >= 500) return "The server failed to answer; nothing was changed.";
    return "The server refused this (error " + status + "); nothing was changed.";
  }

  // The sentence the server's answer shows a person, or "": the role="alert" element of an HTML answer (a fragment,
  // as the panel's refusals are, or the main part of a page, as the members page's refusal is; Django's own error
  // pages have none), or one short line of plain text. Read as text: nothing of the answer runs or is inserted.
  function serverSentence(xhr) {
    var text = typeof xhr.responseText === "string" ? xhr.responseText : "";
    var type = (xhr.getResponseHeader("Content-Type") || "").toLowerCase();
    if (!text.trim()) return "";
    if (type.indexOf("text/plain") === 0) {
      var line = text.trim();
      return line.length <= 300 && line.indexOf("\n") < 0 ? line : "";
    }
    if (type.indexOf("text/html") !== 0) return "";
    var answer = new DOMParser().parseFromString(text, "text/html");
    var alert = answer.querySelector(/<(!doctype|html)\b/i.test(text) ? "main [role=alert]" : "[role=alert]");
    var sentence = alert ? alert.textContent.replace(/\s+/g, " ").trim() : "";
    return sentence.length <= 300 ? sentence : "";
  }

  // What the sentence is about, and whether it goes inside it (a script's request: its target) or after it.
  function placeOf(detail, eventTarget) {
    var elt = detail.elt || eventTarget;
    if (elt instanceof Element && elt !== document.body && elt !== document.documentElement && elt.isConnected) {
      return { about: elt, inside: false };
    }
    var target = detail.target;
    if (target instanceof Element && target !== document.body && target.isConnected) return { about: target, inside: true };
    var main = document.querySelector("main");
    return main ? { about: main, inside: true } : null;
  }

  function show(event, sentence) {
    var detail = event.detail || {};
    var place = placeOf(detail, event.target);
    if (!place) return;
    var message = shown.get(place.about);
    if (!message || !message.isConnected) {
      message = document.createElement("p");
      message.className = "msg error htmx-error";
      message.setAttribute("role", "alert");
      message.setAttribute("data-htmx-error", "");
      if (place.inside) place.about.insertBefore(message, place.about.firstChild);
      else place.about.insertAdjacentElement("afterend", message);
      shown.set(place.about, message);
    }
    message.textContent = sentence;
    if (message.scrollIntoView) message.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = (event.detail || {}).xhr;
    if (!xhr || xhr.getResponseHeader("HX-Redirect")) return;
    show(event, serverSentence(xhr) || statusSentence(xhr.status));
  });

  function unreachable(event) {
    show(event, "The server could not be reached: check your connection and try again.");
  }
  document.addEventListener("htmx:sendError", unreachable);
  document.addEventListener("htmx:timeout", unreachable);

  document.addEventListener("htmx:afterRequest", function (event) {
    var detail = event.detail || {};
    if (detail.successful !== true) return;
    [detail.elt || event.target, detail.target].forEach(function (about) {
      var message = about && shown.get(about);
      if (message) {
        message.remove();
        shown.delete(about);
      }
    });
  });
})();
