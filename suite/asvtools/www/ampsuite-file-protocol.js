/* ampsuite: lets asv's page read its data when it is opened from file://.
 *
 * asv's page fetches info.json, index.json, graphs/... and regressions.json with
 * $.ajax, which browsers refuse for a page opened from file:// ("Cross origin
 * requests are only supported for protocol schemes: http, https, ..."). A script
 * element may load a file:// script, so ampsuite writes every JSON file of the
 * site beside itself as FILE.json.js, a script that hands the data to
 * ampsuiteAsvJson (suite/asvtools/offline.py), and this transport answers asv's
 * JSON requests from those scripts. Served over http(s) (asv preview, any web
 * server) it does nothing.
 */
(function ($) {
  "use strict";
  if (window.location.protocol !== "file:") {
    return;
  }
  window.ampsuiteAsvJson = function (script, data) {
    if (script && script.ampsuiteDeliver) {
      script.ampsuiteDeliver(data);
    }
  };
  $.ajaxTransport("json", function (options) {
    var script = null;
    return {
      send: function (headers, complete) {
        var delivered = false;
        script = document.createElement("script");
        script.ampsuiteDeliver = function (data) {
          delivered = true;
          complete(200, "success", { json: data });
        };
        script.onload = function () {
          script.remove();
          if (!delivered) {
            complete(500, "no data in " + script.src);
          }
        };
        script.onerror = function () {
          script.remove();
          complete(404, "not found: " + script.src);
        };
        script.src = options.url.split("?")[0] + ".js";
        document.head.appendChild(script);
      },
      abort: function () {
        if (script !== null) {
          script.ampsuiteDeliver = function () {};
          script.onload = script.onerror = null;
          script.remove();
        }
      }
    };
  });
})(jQuery);
