%% bench/peers/erlang/peers.erl: smarm's benchmark scenarios as Erlang processes and messages,
%% for the side-by-side comparison of bench/peers (the contract: bench/peers/README.md).
%%
%% One VM runs one configuration (run.sh starts each with its own +S):
%%   erl -noshell +S N:N -pa BEAM_DIR -run peers main SCENARIO VARIANT N
%% and prints one key=value line on stdout; progress goes to stderr. It halts with status 0 when
%% the line was printed, 1 when anything failed (a wrong skynet sum, a process found on the
%% wrong scheduler, a crash, a scheduler count other than N).
%%
%% Placement: a process is bound to scheduler K with the (undocumented) spawn_opt option
%% {scheduler, K}: erl_create_process puts it on run queue K and marks it bound, so neither
%% work stealing nor load balancing moves it. The measuring process is always bound to
%% scheduler 1; partners are bound as each scenario says and report, when they stop, the
%% scheduler they are on (erlang:system_info(scheduler_id)), which is checked.
-module(peers).
-export([main/1, waiter/0, skynet_node/4]).

-define(NOTE_NS, 2000000000).

%% ---- entry --------------------------------------------------------------------------------

main([Scenario, Variant, Scheds]) ->
    Expected = list_to_integer(Scheds),
    Main = self(),
    try
        Online = erlang:system_info(schedulers_online),
        Online =:= Expected orelse
            error({schedulers_online, Online, expected, Expected}),
        {Driver, Ref} =
            spawn_opt(fun() -> Main ! {line, self(), run(Scenario, Variant, Expected)} end,
                      [{scheduler, 1}, monitor]),
        receive
            {line, Driver, Line} ->
                io:put_chars(Line ++ "\n"),
                erlang:halt(0);
            {'DOWN', Ref, process, Driver, Reason} ->
                fail("~s ~s: ~p", [Scenario, Variant, Reason])
        end
    catch
        Class:Why:Stack ->
            fail("~s ~s: ~p:~p ~p", [Scenario, Variant, Class, Why, Stack])
    end;
main(Args) ->
    fail("usage: peers:main([Scenario, Variant, Schedulers]), got ~p", [Args]).

fail(Fmt, Args) ->
    io:format(standard_error, "erlang peer: FAILED: " ++ Fmt ++ "~n", Args),
    erlang:halt(1).

progress(Fmt, Args) ->
    io:format(standard_error, "bench: " ++ Fmt ++ "~n", Args).

%% A positive number from the environment, or the default (as smarm.bench.knob).
knob(Name, Default) ->
    case os:getenv(Name) of
        false -> Default;
        S ->
            V = try list_to_integer(string:trim(S))
                catch _:_ ->
                    try trunc(list_to_float(string:trim(S))) catch _:_ -> 0 end
                end,
            if V > 0 -> V; true -> Default end
    end.

sched_id() -> erlang:system_info(scheduler_id).

%% Fails unless the process reporting Got is on the scheduler it was bound to.
check_placed(What, Expected, Got) ->
    Expected =:= Got orelse error({misplaced, What, expected, Expected, got, Got}),
    ok.

%% ---- the harness (as lua/smarm/bench.lua's measure) -----------------------------------

%% The clock's own cost: the median (nearest rank) of 1000 back-to-back reads.
clock_floor() ->
    Ds = [begin
              T0 = erlang:monotonic_time(nanosecond),
              T1 = erlang:monotonic_time(nanosecond),
              T1 - T0
          end || _ <- lists:seq(1, 1000)],
    element(500, list_to_tuple(lists:sort(Ds))).

%% Op(N) performs N operations. Returns {Samples, Ops, FloorNs}: one sample per batch, the
%% batch's time less the floor, divided by the operations it stands for (0 if not positive);
%% each of Runs runs does Warmup operations first, unrecorded.
measure(Op, O = #{batch := Batch, rounds := Rounds, warmup := Warmup, runs := Runs}) ->
    Per = Batch * maps:get(per_call, O, 1),
    Label = maps:get(label, O),
    Floor = clock_floor(),
    NSamples = max(1, Rounds div Batch),
    {Samples, _} =
        lists:foldl(
          fun(Run, {Acc, Note}) ->
                  Op(Warmup),
                  samples(Op, Batch, Per, Floor, NSamples, Acc, Note, {Label, Run, Runs})
          end, {[], erlang:monotonic_time(nanosecond)}, lists:seq(1, Runs)),
    {Samples, NSamples * Per * Runs, Floor}.

samples(_Op, _Batch, _Per, _Floor, 0, Acc, Note, _Ctx) ->
    {Acc, Note};
samples(Op, Batch, Per, Floor, K, Acc, Note, Ctx) ->
    T0 = erlang:monotonic_time(nanosecond),
    Op(Batch),
    T1 = erlang:monotonic_time(nanosecond),
    Ns = T1 - T0 - Floor,
    S = if Ns > 0 -> Ns / Per; true -> 0.0 end,
    Note1 = if T1 - Note > ?NOTE_NS ->
                    {Label, Run, Runs} = Ctx,
                    progress("~s: run ~b of ~b", [Label, Run, Runs]),
                    T1;
               true -> Note
            end,
    samples(Op, Batch, Per, Floor, K - 1, [S | Acc], Note1, Ctx).

%% Nearest-rank percentiles over all samples, max, mean.
stats(Samples) ->
    Sorted = list_to_tuple(lists:sort(Samples)),
    N = tuple_size(Sorted),
    Q = fun(PerMille) -> element(max(1, (PerMille * N + 999) div 1000), Sorted) end,
    [{"p50_ns", Q(500)}, {"p90_ns", Q(900)}, {"p99_ns", Q(990)}, {"p999_ns", Q(999)},
     {"max_ns", element(N, Sorted)}, {"per_op_ns", lists:sum(Samples) / N}].

line(Scenario, Variant, Scheds, Samples, Ops, Extras) ->
    Fields = [{"scenario", Scenario}, {"variant", Variant}, {"peer", "erlang"},
              {"schedulers", Scheds}]
        ++ stats(Samples) ++ [{"ops", Ops}] ++ lists:keysort(1, Extras),
    lists:flatten(lists:join(" ", [K ++ "=" ++ fmt(V) || {K, V} <- Fields])).

fmt(V) when is_integer(V) -> integer_to_list(V);
fmt(V) when is_float(V), V == trunc(V) -> integer_to_list(trunc(V));
fmt(V) when is_float(V) -> float_to_list(V, [{decimals, 3}]);
fmt(V) when is_atom(V) -> atom_to_list(V);
fmt(V) when is_list(V) -> V.

%% ---- scenarios ----------------------------------------------------------------------------

run("switch_cost", "local", 1) ->
    O = #{rounds => knob("SMARM_SWITCH_ROUNDS", 1000000),
          warmup => knob("SMARM_SWITCH_WARMUP", 10000),
          runs => knob("SMARM_SWITCH_RUNS", 5),
          batch => knob("SMARM_SWITCH_BATCH", 1000),
          label => "switch_cost local"},
    {Samples, Ops, Floor} = measure(fun yield_n/1, O),
    line("switch_cost", "local", 1, Samples, Ops, [{"floor_ns", Floor}]);

run("pingpong", Variant, Scheds) when Variant =:= "local"; Variant =:= "remote" ->
    O = #{rounds => knob("SMARM_PINGPONG_ROUNDS", 200000),
          warmup => knob("SMARM_PINGPONG_WARMUP", 5000),
          runs => knob("SMARM_PINGPONG_RUNS", 5),
          batch => knob("SMARM_PINGPONG_BATCH", 100),
          label => "pingpong " ++ Variant},
    Me = self(),
    PeerSched = Scheds, % local: 1 (both on it); remote: 2 (we are on 1)
    Peer = spawn_opt(fun() -> pong(Me) end, [{scheduler, PeerSched}]),
    {Samples, Ops, Floor} = measure(fun(N) -> ping_n(Peer, N) end, O),
    Peer ! {stop, Me},
    receive {placed, Peer, S} -> check_placed(pong, PeerSched, S) end,
    check_placed(driver, 1, sched_id()),
    line("pingpong", Variant, Scheds, Samples, Ops,
         [{"floor_ns", Floor}] ++ placement(Scheds));

run("ring", Variant, Scheds) when Variant =:= "local"; Variant =:= "spread" ->
    Actors = knob("SMARM_RING_ACTORS", 1000),
    Hops = knob("SMARM_RING_HOPS", 1000000),
    Runs = knob("SMARM_RING_RUNS", 3),
    Me = self(),
    Where = case Variant of
                "local" -> fun(_) -> 1 end;
                "spread" -> fun(I) -> I rem 2 + 1 end  % neighbours alternate, as smarm's
            end,
    Pids = [spawn_opt(fun() -> ring_member(Me, Where(I)) end, [{scheduler, Where(I)}])
            || I <- lists:seq(1, Actors)],
    [First | _] = Pids,
    lists:foreach(fun({P, Next}) -> P ! Next end,
                  lists:zip(Pids, tl(Pids) ++ [First])),
    Laps = max(1, Hops div Actors),
    {Samples, Ops, Floor} =
        measure(fun(N) -> lap_n(First, Actors, N) end,
                #{batch => 1, rounds => Laps, warmup => 2, runs => Runs, per_call => Actors,
                  label => "ring " ++ Variant}),
    First ! 0,
    Bad = collect_placed(Actors, 0),
    Bad =:= 0 orelse error({misplaced, ring_members, Bad}),
    check_placed(driver, 1, sched_id()),
    line("ring", Variant, Scheds, Samples, Ops,
         [{"actors", Actors}, {"floor_ns", Floor}] ++ placement(Scheds));

run("spawn", "waiting", 1) ->
    Actors = knob("SMARM_SPAWN_ACTORS", 100000),
    Runs = knob("SMARM_SPAWN_RUNS", 3),
    erlang:garbage_collect(),
    Rss0 = rss_bytes(),
    Results = [spawn_run(Actors, Rss0, Run, Runs) || Run <- lists:seq(1, Runs)],
    Samples = lists:append([S || {S, _, _} <- Results]),
    Rss = median([R || {_, R, _} <- Results]),
    Release = median([R || {_, _, R} <- Results]),
    line("spawn", "waiting", 1, Samples, Actors * Runs,
         [{"actors", Actors}, {"rss_per_actor_bytes", floor(Rss)},
          {"release_ns_per_actor", Release}]);

run("skynet", _, Scheds) ->
    Depth = knob("SMARM_SKYNET_DEPTH", 5),
    D = integer_to_list(Depth),
    Runs = knob("SMARM_SKYNET_RUNS", 3),
    Actors = lists:sum([pow10(L) || L <- lists:seq(0, Depth)]),
    Leaves = pow10(Depth),
    Samples = [skynet_run(Depth, Leaves, Scheds, Run, Runs) || Run <- lists:seq(1, Runs)],
    P50 = element(2, hd(stats(Samples))),
    progress("skynet: ~.1f ns per actor", [P50 / Actors]),
    line("skynet", "depth" ++ D, Scheds, Samples, Runs,
         [{"actors", Actors}, {"placement", "top_bound"}]);

run("send_sizes", Variant, 2) ->
    {Payload, Copies} = payload(Variant),
    Rounds = knob("SMARM_SEND_ROUNDS", 50000),
    Runs = knob("SMARM_SEND_RUNS", 3),
    Batch = knob("SMARM_SEND_BATCH", 100),
    Me = self(),
    Sink = spawn_opt(fun() -> sink(Me, Batch, 0) end, [{scheduler, 2}]),
    {Samples, Ops, Floor} =
        measure(fun(N) -> send_n(Sink, Payload, N), acks(N div Batch) end,
                #{batch => Batch, rounds => max(Batch, Rounds), warmup => Batch * 10,
                  runs => Runs, label => "send_sizes " ++ Variant}),
    Sink ! stop,
    receive {placed, Sink, S} -> check_placed(sink, 2, S) end,
    check_placed(driver, 1, sched_id()),
    Keys = case Variant of "table_100_fields" -> [{"keys", "binary"}]; _ -> [] end,
    line("send_sizes", Variant, 2, Samples, Ops,
         [{"floor_ns", Floor}, {"copies", Copies}] ++ Keys ++ placement(2));

run(Scenario, Variant, Scheds) ->
    error({unknown_configuration, Scenario, Variant, Scheds}).

placement(1) -> [];
placement(_) -> [{"placement", "bound"}].

%% switch_cost: one process yields to its scheduler and is resumed.
yield_n(0) -> ok;
yield_n(N) -> erlang:yield(), yield_n(N - 1).

%% pingpong: a small integer there and back.
ping_n(_Peer, 0) -> ok;
ping_n(Peer, N) ->
    Peer ! 1,
    receive 1 -> ok end,
    ping_n(Peer, N - 1).

pong(Owner) ->
    receive
        {stop, From} -> From ! {placed, self(), sched_id()};
        M -> Owner ! M, pong(Owner)
    end.

%% ring: a token is the number of hops left; the last hop tells the owner the lap is done.
ring_member(Owner, Sched) ->
    receive Next -> ring_loop(Owner, Next, Sched) end.

ring_loop(Owner, Next, Sched) ->
    receive
        0 -> Next ! 0, Owner ! {placed, sched_id() =:= Sched};
        1 -> Owner ! lap, ring_loop(Owner, Next, Sched);
        Left -> Next ! Left - 1, ring_loop(Owner, Next, Sched)
    end.

lap_n(_First, _Actors, 0) -> ok;
lap_n(First, Actors, N) ->
    First ! Actors,
    receive lap -> ok end,
    lap_n(First, Actors, N - 1).

collect_placed(0, Bad) -> Bad;
collect_placed(K, Bad) ->
    receive {placed, Ok} -> collect_placed(K - 1, if Ok -> Bad; true -> Bad + 1 end) end.

%% spawn: processes that block in receive; released by one message each, the last one to go
%% tells the owner (an atomic counter carried by the message counts them down).
waiter() ->
    receive
        {release, Owner, Left} ->
            case atomics:sub_get(Left, 1, 1) of
                0 -> Owner ! released;
                _ -> ok
            end
    end.

%% One run: {samples of batches of 100 spawns, resident growth per actor, release ns per actor}.
%% The growth is measured from Rss0, read once before the first run: the VM's allocators keep
%% (and reuse) the memory of the processes of an earlier run, so a baseline read before each
%% run would hide most of the growth in every run but the first.
%% As smarm's spawn.lua, where a spawned actor first runs when the spawner yields (every 10,000
%% spawns, outside the timed batches): the spawner runs at high priority while it spawns, so
%% the new processes (normal priority) do not run inside a timed batch, and drops to normal
%% priority and yields to let them reach their receive.
spawn_run(Actors, Rss0, Run, Runs) ->
    erlang:garbage_collect(),
    Mem0 = erlang:memory(processes_used),
    process_flag(priority, high),
    {Samples, Pids} = spawn_batches(1, Actors, [], []),
    process_flag(priority, normal),
    let_run(10),
    wait_all_waiting(Pids, 1000),
    Rss = (rss_bytes() - Rss0) / Actors,
    Mem = (erlang:memory(processes_used) - Mem0) / Actors,
    Left = atomics:new(1, []),
    atomics:put(Left, 1, Actors),
    Me = self(),
    T0 = erlang:monotonic_time(nanosecond),
    lists:foreach(fun(P) -> P ! {release, Me, Left} end, Pids),
    receive released -> ok end,
    T1 = erlang:monotonic_time(nanosecond),
    Release = (T1 - T0) / Actors,
    progress("spawn: run ~b of ~b: ~.1f resident bytes per actor (the VM counts ~.1f bytes of "
             "process memory), release ~.1f ns per actor", [Run, Runs, Rss, Mem, Release]),
    {Samples, Rss, Release}.

spawn_batches(I, Actors, Samples, Pids) when I > Actors ->
    {Samples, Pids};
spawn_batches(I, Actors, Samples, Pids) ->
    Count = min(100, Actors - I + 1),
    T0 = erlang:monotonic_time(nanosecond),
    Pids1 = spawn_k(Count, Pids),
    T1 = erlang:monotonic_time(nanosecond),
    I rem 10000 =:= 1 andalso let_run(1),
    spawn_batches(I + 100, Actors, [(T1 - T0) / Count | Samples], Pids1).

spawn_k(0, Pids) -> Pids;
spawn_k(K, Pids) -> spawn_k(K - 1, [spawn(?MODULE, waiter, []) | Pids]).

%% From high priority: let the normal-priority processes run, then take the priority back.
let_run(Times) ->
    Prio = process_flag(priority, normal),
    [erlang:yield() || _ <- lists:seq(1, Times)],
    process_flag(priority, Prio),
    ok.

%% Every waiter blocked in its receive (checked on the newest and the oldest).
wait_all_waiting(_Pids, 0) -> error(waiters_not_waiting);
wait_all_waiting(Pids, Tries) ->
    Newest = hd(Pids),
    Oldest = lists:last(Pids),
    case {erlang:process_info(Newest, status), erlang:process_info(Oldest, status)} of
        {{status, waiting}, {status, waiting}} -> ok;
        _ -> erlang:yield(), wait_all_waiting(Pids, Tries - 1)
    end.

rss_bytes() ->
    {ok, Statm} = file:read_file("/proc/self/statm"),
    [_Size, Resident | _] = binary:split(Statm, [<<" ">>, <<"\n">>], [global, trim_all]),
    binary_to_integer(Resident) * 4096.

median(Xs) ->
    S = lists:sort(Xs),
    lists:nth((length(S) + 1) div 2, S).

%% skynet: the classic one. A node with levels below it spawns ten children and sends the sum
%% of their ten answers up; a leaf sends its number. The ten children of the top (this process)
%% are bound to the schedulers in turn (smarm's spawn_on(i % schedulers + 1)); everything below
%% them is spawned plainly, on its parent's scheduler, and the VM may move it.
skynet_run(Depth, Leaves, Scheds, Run, Runs) ->
    Me = self(),
    ChildSize = Leaves div 10,
    T0 = erlang:monotonic_time(nanosecond),
    [spawn_opt(?MODULE, skynet_node, [Me, I * ChildSize, Depth - 1, ChildSize],
               [{scheduler, I rem Scheds + 1}]) || I <- lists:seq(0, 9)],
    Sum = sum_n(10, 0),
    T1 = erlang:monotonic_time(nanosecond),
    Want = Leaves * (Leaves - 1) div 2,
    Sum =:= Want orelse error({skynet_wrong_sum, Sum, expected, Want}),
    progress("skynet: run ~b of ~b: ~b ms (sum ~b ok)", [Run, Runs, (T1 - T0) div 1000000, Sum]),
    T1 - T0.

skynet_node(Parent, Num, 0, _Size) ->
    Parent ! Num;
skynet_node(Parent, Num, Level, Size) ->
    Me = self(),
    Child = Size div 10,
    spawn_children(Me, Num, Level - 1, Child, 0),
    Parent ! sum_n(10, 0).

spawn_children(_Me, _Num, _Level, _Child, 10) -> ok;
spawn_children(Me, Num, Level, Child, I) ->
    spawn(?MODULE, skynet_node, [Me, Num + I * Child, Level, Child]),
    spawn_children(Me, Num, Level, Child, I + 1).

sum_n(0, Sum) -> Sum;
sum_n(K, Sum) -> receive N -> sum_n(K - 1, Sum + N) end.

pow10(0) -> 1;
pow10(L) -> 10 * pow10(L - 1).

%% send_sizes: payloads made at run time (not literals). Binaries up to 64 bytes live on the
%% process heap and are copied into the receiver; larger ones are reference-counted and only a
%% reference is sent. The map has 100 binary keys <<"field1">>..<<"field100">> (as smarm's
%% table's string keys) with integer values; it is copied.
payload("string_8B") -> {binary:copy(<<"x">>, 8), "yes"};
payload("string_1KiB") -> {binary:copy(<<"x">>, 1024), "refc"};
payload("string_64KiB") -> {binary:copy(<<"x">>, 65536), "refc"};
payload("table_100_fields") ->
    {maps:from_list([{<<"field", (integer_to_binary(I))/binary>>, I}
                     || I <- lists:seq(1, 100)]), "yes"};
payload(Other) -> error({unknown_variant, send_sizes, Other}).

send_n(_Sink, _Payload, 0) -> ok;
send_n(Sink, Payload, N) -> Sink ! Payload, send_n(Sink, Payload, N - 1).

acks(0) -> ok;
acks(K) -> receive ack -> acks(K - 1) end.

%% The sink acknowledges every PerAck messages.
sink(Owner, PerAck, Got) ->
    receive
        stop -> Owner ! {placed, self(), sched_id()};
        _ when Got + 1 =:= PerAck -> Owner ! ack, sink(Owner, PerAck, 0);
        _ -> sink(Owner, PerAck, Got + 1)
    end.
