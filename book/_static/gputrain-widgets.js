// Loaded between require.js and the widget manager (see _config.yml). The
// manager finds its fonts next to the URL require.js gives its AMD modules;
// without this mapping that URL is "<page dir>/@jupyter-widgets/...", which
// does not exist on this site (it would be a CDN on others). The site is
// offline, so point require.js at the vendored copy, next to this script: the
// Chinese editions (zh-tw/, zh-cn/) load this file and the vendored copy from
// the English site's _static/, which their own content root does not reach.
require.config({
  paths: {
    "@jupyter-widgets": new URL("vendor/@jupyter-widgets", document.currentScript.src).href,
  },
});

// ipywidgets typesets labels through MathJax 2's API (MathJax.Hub.Queue); this
// site runs MathJax 3, which has no Hub, so a widget that renders after MathJax
// is defined throws. Offer the one call widgets make, mapped onto MathJax 3, on
// whatever object ends up as window.MathJax (MathJax 3 replaces it while loading).
(function () {
  var hub = {
    Queue: function () {
      for (var i = 0; i < arguments.length; i++) {
        var a = arguments[i];
        var el = Array.isArray(a) && a[0] === "Typeset" ? a[2] : null;
        if (el && current && current.typesetPromise) current.typesetPromise([el]);
      }
    },
  };
  var current = window.MathJax;
  if (current && !current.Hub) current.Hub = hub;
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    get: function () { return current; },
    set: function (value) {
      if (value && typeof value === "object" && !value.Hub) value.Hub = hub;
      current = value;
    },
  });
})();
