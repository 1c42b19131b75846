// Program text form and validator.

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/program.hpp"
#include "expect_input_error.hpp"
#include "schedules/beyond.hpp"
#include "schedules/schedules.hpp"

namespace pipegrid {
namespace {

Program from_text(const std::string& text) { return parse_program_text(text, "test.program"); }

std::string validation_error(const Program& program) {
  try {
    validate_program(program);
  } catch (const ProgramError& error) {
    return error.what();
  }
  return "";
}

TEST(ProgramText, ActionsPrintAndParse) {
  EXPECT_EQ(to_string(parse_action("2F0")), "2F0");
  EXPECT_EQ(to_string(parse_action("11B3@2")), "11B3@2");
  const Action recompute = parse_action("1R4");
  EXPECT_EQ(recompute.kind, ActionKind::Recompute);
  EXPECT_EQ(recompute.stage, 1);
  EXPECT_EQ(recompute.micro_batch, 4);
  for (const char* bad : {"", "F0", "2X0", "2F", "2F0@", "-1F0", "2F0x", "2F0@1@2"})
    EXPECT_THROW(parse_action(bad), InputError) << bad;
}

TEST(ProgramText, RoundTripsEverySchedule) {
  for (const ScheduleInfo& info : schedule_catalog()) {
    for (bool replicated : {false, true}) {
      ScheduleOptions options;
      options.num_stages = info.single_stage ? 1 : 3;
      options.micro_batches = info.flushed ? 7 : 1;
      options.mini_batches = info.flushed ? 2 : 9;
      if (replicated) options.replicas = info.single_stage ? std::vector<int>{3} : std::vector<int>{2, 1, 3};
      options.wait_free = info.name == "dp" && replicated;
      if (is_beyond_schedule(info.name)) {  // one replica per stage, 3 devices
        if (replicated) continue;
        options.virtual_stages = default_virtual_stages(info.name);
        options.num_stages = 3 * options.virtual_stages;
        options.micro_batches = 6;
        if (info.two_copies) options.num_stages = 4, options.micro_batches = 8;  // dualpipe: p and m even, m >= 2p
      }
      const Program program = generate_schedule(info.name, options);
      if (replicated) {
        EXPECT_FALSE(program.all_reduces.empty()) << info.name;
      }
      EXPECT_EQ(from_text(program_to_text(program)), program) << info.name << " replicated=" << replicated;
    }
  }
}

TEST(ProgramText, AllReduceLines) {
  ScheduleOptions options;
  options.micro_batches = 2;
  options.mini_batches = 2;
  options.replicas = {2};
  EXPECT_EQ(program_to_text(generate_schedule("dp", options)),
            "# pipegrid program: 1 stages, 2 micro-batches, 2 mini-batches\n"
            "device 0 stage 0 replica 0 stream 0: 0F0 0B0 0F0@1 0B0@1\n"
            "device 1 stage 0 replica 1 stream 0: 0F1 0B1 0F1@1 0B1@1\n"
            "allreduce stage 0 round 0: ready 0B0 0B1 release 0F0@1 0F1@1\n"
            "allreduce stage 0 round 1: ready 0B0@1 0B1@1\n");
  for (const char* bad : {"allreduce stage 0 round 0 ready 0B0", "allreduce stage x round 0: ready 0B0",
                          "allreduce stage 0 round 0: 0B0 0B1", "allreduce stage 0 round 0: ready 0Q0"})
    EXPECT_THROW(parse_program_text(std::string("# pipegrid program: 1 stages, 2 micro-batches, 1 mini-batches\n") + bad + "\n", "p.txt"),
                 InputError)
        << bad;
}

TEST(ProgramValidator, AllReducesNameBackwardsOfTheirStageOnDistinctDevices) {
  ScheduleOptions options;
  options.micro_batches = 2;
  options.replicas = {2};
  const Program good = generate_schedule("dp", options);
  Program program = good;
  program.all_reduces[0].ready = {parse_action("0F0"), parse_action("0B1")};
  EXPECT_THROW(validate_program(program), ProgramError);
  program = good;
  program.all_reduces[0].ready = {parse_action("0B0"), parse_action("0B0")};
  EXPECT_THROW(validate_program(program), ProgramError);
  program = good;
  program.all_reduces[0].ready = {parse_action("0B0"), parse_action("0B7")};
  EXPECT_THROW(validate_program(program), ProgramError);
  // Releasing an action that the all-reduce itself waits for deadlocks.
  program = good;
  program.all_reduces[0].release = {parse_action("0B1")};
  try {
    validate_program(program);
    FAIL() << "expected a deadlock";
  } catch (const ProgramError& error) {
    EXPECT_NE(std::string(error.what()).find("0B1 waits for allreduce stage 0 round 0"), std::string::npos) << error.what();
  }
}

TEST(ProgramText, AnAllReduceRoundDeclaredTwiceNamesTheFileAndBothLines) {
  const std::string head =
      "# pipegrid program: 1 stages, 2 micro-batches, 2 mini-batches\n"
      "device 0 stage 0 replica 0 stream 0: 0F0 0B0 0F0@1 0B0@1\n"
      "device 1 stage 0 replica 1 stream 0: 0F1 0B1 0F1@1 0B1@1\n"
      "allreduce stage 0 round 0: ready 0B0 0B1\n";
  const std::string error = testutil::input_error_of([&] { parse_program_text(head + "allreduce stage 0 round 0: ready 0B0 0B1\n", "ar.txt"); });
  EXPECT_CONTAINS(error, "ar.txt:5: allreduce stage 0 round 0 is declared a second time (first on line 4)");
  // The same round with other backwards, or per-layer, is the same round.
  const std::string again =
      testutil::input_error_of([&] { parse_program_text(head + "\nallreduce stage 0 round 0 per-layer: ready 0B0@1 0B1@1\n", "ar.txt"); });
  EXPECT_CONTAINS(again, "ar.txt:6: allreduce stage 0 round 0 is declared a second time (first on line 4)");
  // Another round of the stage is fine.
  EXPECT_NO_THROW(validate_program(parse_program_text(head + "allreduce stage 0 round 1: ready 0B0@1 0B1@1\n", "ar.txt")));
}

TEST(ProgramValidator, AnAllReduceRoundDeclaredTwiceIsRejected) {
  ScheduleOptions options;
  options.micro_batches = 2;
  options.mini_batches = 2;
  options.replicas = {2};
  Program program = generate_schedule("dp", options);
  ASSERT_EQ(program.all_reduces.size(), 2u);
  program.all_reduces[1].round = 0;
  try {
    validate_program(program);
    FAIL() << "expected a ProgramError";
  } catch (const ProgramError& error) {
    EXPECT_CONTAINS(std::string(error.what()), "allreduce stage 0 round 0 is declared twice");
  }
}

TEST(ProgramText, KnownText) {
  ScheduleOptions options;
  options.num_stages = 2;
  options.micro_batches = 2;
  EXPECT_EQ(program_to_text(generate_schedule("1f1b-sno", options)),
            "# pipegrid program: 2 stages, 2 micro-batches, 1 mini-batches\n"
            "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1\n"
            "device 1 stage 1 replica 0 stream 0: 1F0 1B0 1F1 1B1\n");
}

TEST(ProgramText, ErrorsNameTheLine) {
  try {
    from_text("# pipegrid program: 1 stages, 1 micro-batches, 1 mini-batches\ndevice 0 stage 0 replica 0 stream 0: 0F0 0Q0\n");
    FAIL();
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("test.program:2"), std::string::npos) << error.what();
  }
  EXPECT_THROW(from_text("device 0 stage 0 replica 0 stream 0: 0F0 0B0\n"), InputError);  // no header
  EXPECT_THROW(from_text("# pipegrid program: 1 stages, 1 micro-batches, 1 mini-batches\nbogus line\n"), InputError);
}

const char* kHeader2x2 = "# pipegrid program: 2 stages, 2 micro-batches, 1 mini-batches\n";

TEST(ProgramValidator, BackwardBeforeItsForwardIsMarkedInTheGrid) {
  const std::string message = validation_error(from_text(std::string(kHeader2x2) +
                                                         "device 0 stage 0 replica 0 stream 0: 0F0 0B1 0F1 0B0\n"
                                                         "device 1 stage 1 replica 0 stream 0: 1F0 1B0 1F1 1B1\n"));
  EXPECT_NE(message.find("0B1 comes before its forward 0F1"), std::string::npos) << message;
  EXPECT_NE(message.find("<-- ERROR HERE (step 1: 0B1)"), std::string::npos) << message;
}

TEST(ProgramValidator, DeadlockIsReportedWithTheStuckSteps) {
  // Stage 0 wants B0 (from stage 1) before sending F1; stage 1 wants F1 before B0.
  const std::string message = validation_error(from_text(std::string(kHeader2x2) +
                                                         "device 0 stage 0 replica 0 stream 0: 0F0 0B0 0F1 0B1\n"
                                                         "device 1 stage 1 replica 0 stream 0: 1F0 1F1 1B0 1B1\n"));
  EXPECT_NE(message.find("deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("<-- ERROR HERE (step 1: 0B0)"), std::string::npos) << message;
  EXPECT_NE(message.find("<-- ERROR HERE (step 1: 1F1)"), std::string::npos) << message;
}

TEST(ProgramValidator, MissingDuplicatedAndMisplacedActions) {
  EXPECT_NE(validation_error(from_text(std::string(kHeader2x2) +
                                       "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1\n"
                                       "device 1 stage 1 replica 0 stream 0: 1F0 1B0 1F1\n"))
                .find("1B1 is missing"),
            std::string::npos);
  EXPECT_NE(validation_error(from_text(std::string(kHeader2x2) +
                                       "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1 0B1\n"
                                       "device 1 stage 1 replica 0 stream 0: 1F0 1B0 1F1 1B1\n"))
                .find("0B1 appears twice"),
            std::string::npos);
  EXPECT_NE(validation_error(from_text(std::string(kHeader2x2) +
                                       "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1 1F0\n"
                                       "device 1 stage 1 replica 0 stream 0: 1B0 1F1 1B1\n"))
                .find("belongs to stage 1"),
            std::string::npos);
}

TEST(ProgramValidator, ExtraDependenciesMustNameScheduledActionsAndCanDeadlock) {
  const std::string base = std::string(kHeader2x2) +
                           "device 0 stage 0 replica 0 stream 0: 0F0 0F1 0B0 0B1\n"
                           "device 1 stage 1 replica 0 stream 0: 1F0 1B0 1F1 1B1\n";
  EXPECT_EQ(validation_error(from_text(base)), "");
  EXPECT_NE(validation_error(from_text(base + "dependency 0B5 -> 0F1\n")).find("not in the program"), std::string::npos);
  EXPECT_NE(validation_error(from_text(base + "dependency 0B1 -> 0F1\n")).find("deadlock"), std::string::npos);
}

}  // namespace
}  // namespace pipegrid
