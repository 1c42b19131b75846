# Reads validate --json (a steady-state comparison) and prints what must hold
# whatever the timings: the actions matched per mini-batch of the compared
# cycle, the cycle's length as a multiple of `round` (-v round=R: the
# replicas' round or update interval), how many more mini-batches were
# measured than simulated, and whether the measured cycle is the simulated
# one's at one phase of the Program (as far from the end, shifted back to
# whole cycles after the warm-up: docs/validation.md).
/^  "matched_actions"/ { matched = $2 + 0 }
/^  "warmup_minibatches"/ { warmup = $2 + 0 }
/^  "simulated_minibatches"/ { simulated_count = $2 + 0 }
/^  "measured_minibatches"/ { measured_count = $2 + 0 }
/^    "cycle_minibatches"/ { cycle = $2 + 0 }
/^    "simulated_first_minibatch"/ { simulated = $2 + 0 }
/^    "measured_first_minibatch"/ { measured = $2 + 0 }
END {
  if (round == "") round = 1
  if (cycle < 1) { print "no steady cycle"; exit }
  print (matched % cycle == 0 ? matched / cycle " actions matched per mini-batch of the cycle" : "matched " matched " is not whole mini-batches of the cycle " cycle)
  print (cycle % round == 0 ? "the cycle is whole rounds of " round : "cycle " cycle " is not a multiple of " round)
  room = measured_count - simulated_count
  print (simulated_count > 0 ? room " more mini-batches measured than simulated" : "no mini-batches simulated")
  print (measured == simulated + room - ((room + warmup) % cycle + cycle) % cycle ? "the measured cycle is at the simulated one's phase" : "measured cycle " measured " vs simulated " simulated)
}
