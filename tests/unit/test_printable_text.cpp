// printable_text: what an untrained model's bytes look like on a terminal.
#include <gtest/gtest.h>

#include "fsdpp/data/printable_text.h"

using fsdpp::data::printable_text;

TEST(PrintableText, KeepsUtf8NewlinesAndTabs) {
  EXPECT_EQ(printable_text("Q: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n\tok"),
            "Q: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n\tok");
}

TEST(PrintableText, EscapesWhatIsNotTextByteByByte) {
  EXPECT_EQ(printable_text(std::string("a\x00" "b", 3)), "a\\x00b");
  EXPECT_EQ(printable_text("\x1b[2J"), "\\x1b[2J");           // an escape sequence
  EXPECT_EQ(printable_text("\xe9t\xe9"), "\\xe9t\\xe9");        // Latin-1
  EXPECT_EQ(printable_text("\xe2\x82"), "\\xe2\\x82");          // a cut character
  EXPECT_EQ(printable_text("\xc3\x28"), "\\xc3(");              // a bad continuation
  EXPECT_EQ(printable_text("\x7f\xff"), "\\x7f\\xff");
}
