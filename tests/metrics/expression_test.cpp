#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "csp/metrics/expression.hpp"

using namespace csp::metrics;

namespace {

double eval(std::string_view text, const std::map<std::string, double, std::less<>>& env = {}) {
  return Expression::parse(text).evaluate([&](std::string_view name) -> std::optional<double> {
    const auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// The column of the parse error, or 0 if there is none.
std::size_t errorColumn(std::string_view text, std::string* message = nullptr) {
  try {
    Expression::parse(text);
  } catch (const ExpressionError& e) {
    if (message) *message = e.what();
    return e.column();
  }
  return 0;
}

}  // namespace

TEST(Expression, PrecedenceAndAssociativity) {
  EXPECT_EQ(eval("1 + 2 * 3"), 7);
  EXPECT_EQ(eval("(1 + 2) * 3"), 9);
  EXPECT_EQ(eval("10 - 4 - 3"), 3);
  EXPECT_EQ(eval("64 / 8 / 2"), 4);
  EXPECT_EQ(eval("-2 * -3"), 6);
  EXPECT_EQ(eval("2 - -1"), 3);
  EXPECT_EQ(eval("--4"), 4);
  EXPECT_EQ(eval("-(1 + 2) * 2"), -6);
  EXPECT_EQ(eval(".5 + 1.25e1 + 2E-1"), 13.2);
}

TEST(Expression, NamesAndQuoting) {
  const std::map<std::string, double, std::less<>> env = {
      {"a", 10}, {"b", 4}, {"cpu-time", 6}, {"wall.time", 3}, {"PAPI_TOT_CYC", 8}, {"x y", 1}};
  EXPECT_EQ(eval("a-b", env), 6);  // '-' outside quotes is always minus
  EXPECT_EQ(eval("`cpu-time` / {wall.time}", env), 2);
  EXPECT_EQ(eval("wall.time * 2", env), 6);
  EXPECT_EQ(eval("PAPI_TOT_CYC + {x y}", env), 9);
  const Expression e = Expression::parse("b * a + b + `cpu-time`");
  EXPECT_EQ(e.names(), (std::vector<std::string>{"b", "a", "cpu-time"}));
  EXPECT_EQ(e.column(0), 1u);
  EXPECT_EQ(e.column(1), 5u);
  EXPECT_EQ(e.column(2), 13u);
  const double values[] = {4, 10, 6};
  EXPECT_EQ(e.evaluate(values), 50);
  EXPECT_THROW(e.evaluate(std::span<const double>(values, 2)), std::invalid_argument);
}

TEST(Expression, Functions) {
  EXPECT_EQ(eval("min(3, 2) + max(3, 2)"), 5);
  EXPECT_EQ(eval("sqrt(16)"), 4);
  EXPECT_DOUBLE_EQ(eval("log(100) / log(10)"), 2);
  EXPECT_EQ(eval("max(min(1, 2), -5)"), 1);
  // A metric may be named like a function; only a following '(' makes a call.
  EXPECT_EQ(eval("log + 1", {{"log", 2}}), 3);
}

TEST(Expression, UndefinedResultsAreNaN) {
  EXPECT_TRUE(std::isnan(eval("1 / 0")));
  EXPECT_TRUE(std::isnan(eval("0 / 0")));
  EXPECT_TRUE(std::isnan(eval("sqrt(-1)")));
  EXPECT_TRUE(std::isnan(eval("log(0)")));
  EXPECT_TRUE(std::isnan(eval("log(-1)")));
  EXPECT_TRUE(std::isnan(eval("min(1 / 0, 5)")));
  EXPECT_TRUE(std::isnan(eval("max(5, 0 / 0)")));
  EXPECT_TRUE(std::isnan(eval("1 + 2 / (3 - 3)")));
}

TEST(Expression, ParseErrorsNameTheColumn) {
  std::string message;
  EXPECT_EQ(errorColumn("1 +", &message), 4u);
  EXPECT_NE(message.find("column 4: expected a number, a name or '('"), std::string::npos) << message;
  EXPECT_EQ(errorColumn("(1 + 2", &message), 7u);
  EXPECT_NE(message.find("expected ')'"), std::string::npos) << message;
  EXPECT_EQ(errorColumn("1 2"), 3u);
  EXPECT_EQ(errorColumn("a b"), 3u);
  EXPECT_EQ(errorColumn("foo(1)", &message), 1u);
  EXPECT_NE(message.find("unknown function 'foo'"), std::string::npos);
  EXPECT_EQ(errorColumn("1 + min(1)", &message), 5u);
  EXPECT_NE(message.find("min takes 2 arguments, given 1"), std::string::npos) << message;
  EXPECT_EQ(errorColumn("sqrt(1, 2)"), 1u);
  EXPECT_EQ(errorColumn("a + `abc", &message), 5u);
  EXPECT_NE(message.find("unterminated"), std::string::npos);
  EXPECT_EQ(errorColumn("{}"), 1u);
  EXPECT_EQ(errorColumn("1e+"), 2u);
  EXPECT_EQ(errorColumn("a $ b", &message), 3u);
  EXPECT_NE(message.find("unexpected character '$'"), std::string::npos);
  EXPECT_EQ(errorColumn("2x"), 2u);
  EXPECT_EQ(errorColumn(""), 1u);
  EXPECT_EQ(errorColumn("()"), 2u);
  EXPECT_EQ(errorColumn("1 = 2"), 3u);
  EXPECT_EQ(errorColumn("1e999"), 1u);
}

TEST(Expression, HostileNestingIsAnErrorNotACrash) {
  const std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  std::string message;
  EXPECT_GT(errorColumn(deep, &message), 0u);
  EXPECT_NE(message.find("nested too deeply"), std::string::npos);
  EXPECT_GT(errorColumn(std::string(5000, '-') + "1"), 0u);
  const std::string fine = std::string(50, '(') + "1" + std::string(50, ')');
  EXPECT_EQ(eval(fine), 1);
}

TEST(Expression, UnknownMetricAtEvaluationNamesTheColumn) {
  try {
    eval("a + cycles", {{"a", 1}});
    FAIL();
  } catch (const ExpressionError& e) {
    EXPECT_EQ(e.column(), 5u);
    EXPECT_NE(std::string(e.what()).find("unknown metric 'cycles'"), std::string::npos);
  }
}

TEST(Expression, UnquotedDashedNameGetsAHint) {
  try {
    eval("2 * cpu-time", {{"cpu-time", 1}});
    FAIL();
  } catch (const ExpressionError& e) {
    EXPECT_EQ(e.column(), 5u);
    EXPECT_NE(std::string(e.what()).find("unknown metric 'cpu' (names containing '-' must be quoted: `cpu-time`"),
              std::string::npos)
        << e.what();
  }
  try {
    SummaryFormula::parse("r = cpu-time.sum / 2")
        .evaluate([](std::string_view, Population) -> std::optional<Statistics> { return std::nullopt; });
    FAIL();
  } catch (const ExpressionError& e) {
    EXPECT_EQ(e.column(), 5u);
    EXPECT_NE(std::string(e.what()).find("quoted: `cpu-time.sum`"), std::string::npos) << e.what();
  }
}

TEST(Expression, Definitions) {
  const Definition d = parseDefinition("ipc = instructions / cycles");
  EXPECT_EQ(d.name, "ipc");
  EXPECT_EQ(d.expression.text(), "instructions / cycles");
  EXPECT_EQ(d.expression.column(1), 22u);  // columns count from the start of the definition
  EXPECT_EQ(parseDefinition("`cpu-ms` = `cpu-ns` / 1e6").name, "cpu-ms");
  try {
    parseDefinition("ipc instructions / cycles");
    FAIL();
  } catch (const ExpressionError& e) {
    EXPECT_EQ(e.column(), 5u);
    EXPECT_NE(std::string(e.what()).find("expected '='"), std::string::npos);
  }
  EXPECT_THROW(parseDefinition("= 1"), ExpressionError);
  EXPECT_THROW(parseDefinition("x = "), ExpressionError);
  EXPECT_THROW(parseDefinition("x = 1 = 2"), ExpressionError);
}

TEST(PerThreadDerivedMetric, UndefinedValuesAreAbsent) {
  const auto ipc = PerThreadDerivedMetric::parse("ipc = instructions / cycles");
  EXPECT_EQ(ipc.name(), "ipc");
  EXPECT_EQ(ipc.inputs(), (std::vector<std::string>{"instructions", "cycles"}));
  const double ok[] = {10, 4};
  EXPECT_EQ(ipc.evaluate(ok), 2.5);
  const double zero[] = {10, 0};
  EXPECT_EQ(ipc.evaluate(zero), std::nullopt);
}

TEST(SummaryFormula, ReferencesSplitIntoMetricPopulationAndStatistic) {
  const auto f = SummaryFormula::parse("x = cycles.sum / instructions + `cpu-time.present.mean` - a.b.all.max");
  EXPECT_EQ(f.name(), "x");
  ASSERT_EQ(f.references().size(), 4u);
  EXPECT_EQ(f.references()[0], (StatisticRef{"cycles", Population::All, Statistic::Sum}));
  EXPECT_EQ(f.references()[1], (StatisticRef{"instructions", Population::All, Statistic::Sum}));
  EXPECT_EQ(f.references()[2], (StatisticRef{"cpu-time", Population::Present, Statistic::Mean}));
  EXPECT_EQ(f.references()[3], (StatisticRef{"a.b", Population::All, Statistic::Max}));
  // A leading dot is part of the name, not a separator.
  EXPECT_EQ(SummaryFormula::parse("y = `.mean`").references()[0].metric, ".mean");
}

TEST(SummaryFormula, CyclesPerInstructionIsARatioOfSums) {
  // Per thread: (cycles, instructions) = (100, 10) and (300, 100): CPI of the sums is 400/110,
  // not the mean of the per-thread CPIs (10 and 3).
  Statistics cycles, instructions;
  cycles.sum = 400;
  cycles.mean = 200;
  instructions.sum = 110;
  const auto cpi = SummaryFormula::parse("cpi = cycles / instructions.sum");
  const double v = cpi.evaluate([&](std::string_view m, Population) -> std::optional<Statistics> {
    if (m == "cycles") return cycles;
    if (m == "instructions") return instructions;
    return std::nullopt;
  });
  EXPECT_DOUBLE_EQ(v, 400.0 / 110);
  EXPECT_THROW(
      SummaryFormula::parse("z = nope.mean").evaluate([](std::string_view, Population) -> std::optional<Statistics> {
        return std::nullopt;
      }),
      ExpressionError);
}

TEST(SummaryFormula, SelectsEveryStatistic) {
  Statistics s;
  s.count = 3;
  s.sum = 1;
  s.mean = 2;
  s.min = 3;
  s.max = 4;
  s.stddev = 5;
  s.cfvar = 6;
  s.imbalance = 7;
  const Statistic all[] = {Statistic::Count, Statistic::Sum,    Statistic::Mean,  Statistic::Min,
                           Statistic::Max,   Statistic::Stddev, Statistic::Cfvar, Statistic::Imbalance};
  const double expected[] = {3, 1, 2, 3, 4, 5, 6, 7};
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(valueOf(s, all[i]), expected[i]);
    const auto f = SummaryFormula::parse(std::string("v = m.") + toString(all[i]));
    EXPECT_EQ(f.references()[0].statistic, all[i]);
  }
}
