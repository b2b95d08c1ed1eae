// render(): every answer in the formats it has (render.hpp).
#include <ostream>

#include "csp/views/render.hpp"

namespace csp::views {

namespace {

[[noreturn]] void unavailable(const char* what, const char* formats) {
  throw ViewError(std::string(what) + " is available as " + formats);
}

void renderTree(const ViewTree& tree, Format format, std::ostream& out, const TextOptions& text,
                const std::string& title) {
  switch (format) {
    case Format::Text:
      return renderText(tree, out, text);
    case Format::Csv:
      return renderCsv(tree, out);
    case Format::Json:
      return renderJson(tree, out);
    case Format::Folded:
      return renderFolded(tree, out);
    case Format::Speedscope:
      return renderSpeedscope(tree, out, title);
  }
}

void renderDistribution(const Distribution& d, Format format, std::ostream& out, const TextOptions& text) {
  switch (format) {
    case Format::Text:
      return renderDistributionText(d, out, text);
    case Format::Csv:
      return renderDistributionCsv(d, out);
    case Format::Json:
      return renderDistributionJson(d, out);
    default:
      unavailable("--node", "text, csv or json");
  }
}

void renderQuery(const QueryAnswer& a, Format format, std::ostream& out) {
  switch (format) {
    case Format::Text:
      return renderQueryText(a, out);
    case Format::Csv:
      return renderQueryCsv(a, out);
    case Format::Json:
      return renderQueryJson(a, out);
    default:
      unavailable("a query", "text, csv or json");
  }
}

// Answers with a text and a JSON form only.
template <typename T>
void renderTextOrJson(const T& answer, Format format, std::ostream& out, void (*text)(const T&, std::ostream&),
                      void (*json)(const T&, std::ostream&), const char* what) {
  if (format == Format::Text) return text(answer, out);
  if (format == Format::Json) return json(answer, out);
  unavailable(what, "text or json");
}

}  // namespace

void render(const Answer& answer, Format format, std::ostream& out, const TextOptions& text, const std::string& title) {
  struct Visitor {
    Format format;
    std::ostream& out;
    const TextOptions& text;
    const std::string& title;
    void operator()(const ViewTree& t) const { renderTree(t, format, out, text, title); }
    void operator()(const Distribution& d) const { renderDistribution(d, format, out, text); }
    void operator()(const QueryAnswer& a) const { renderQuery(a, format, out); }
    void operator()(const DatabaseInfo& i) const {
      renderTextOrJson(i, format, out, &renderInfoText, &renderInfoJson, "--info");
    }
    void operator()(const analysis::ImbalanceReport& r) const {
      renderTextOrJson(r, format, out, &renderImbalanceText, &renderImbalanceJson, "--imbalance");
    }
    void operator()(const DiffReport& r) const {
      renderTextOrJson(r, format, out, &renderDiffText, &renderDiffJson, "a diff report");
    }
  };
  std::visit(Visitor{format, out, text, title}, answer);
}

}  // namespace csp::views
