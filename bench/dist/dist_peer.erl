%% The Erlang side of bench/dist.lua: an echo node, and the Erlang-to-Erlang baseline measured
%% the way bench/dist.lua measures smarm (batches of operations timed, per-operation quantiles).
%%
%%   erl -sname Name -setcookie C -noshell -pa Dir -run dist_peer serve
%%       registers `echo` ({From, X} -> From ! {self(), X}) and `sink` (counts messages; {count,
%%       From} answers {counted, N} and counts again from 0); prints "ready"
%%   erl -sname Name -setcookie C -noshell -pa Dir -run dist_peer measure EchoNode Rounds Warmup Runs Batch Count
%%       prints a line of the round trip's quantiles, and one of the one-way rate (Count messages
%%       of 100 bytes to sink), as key=value pairs, then halts
-module(dist_peer).
-export([serve/0, measure/1]).

serve() ->
    register(echo, spawn(fun echo/0)),
    register(sink, spawn(fun() -> sink(0) end)),
    io:format("ready~n"),
    receive after infinity -> ok end.

echo() ->
    receive {From, X} -> From ! {self(), X} end,
    echo().

%% Messages from one sender arrive in order: its count comes after all it sent.
sink(N) ->
    receive
        {count, From} -> From ! {counted, N}, sink(0);
        _ -> sink(N + 1)
    end.

measure([Node0, Rounds0, Warmup0, Runs0, Batch0, Count0]) ->
    Node = list_to_atom(Node0),
    [Rounds, Warmup, Runs, Batch, Count] =
        [list_to_integer(X) || X <- [Rounds0, Warmup0, Runs0, Batch0, Count0]],
    {echo, Node} ! {self(), 0},
    Echo = receive {P, 0} -> P end,
    Samples = lists:append([run(Echo, Rounds, Warmup, Batch) || _ <- lists:seq(1, Runs)]),
    Sorted = lists:sort(Samples),
    Q = fun(F) -> lists:nth(max(1, min(length(Sorted), round(F * length(Sorted)))), Sorted) end,
    io:format("roundtrip p50_ns=~.3f p90_ns=~.3f p99_ns=~.3f max_ns=~.3f ops=~p~n",
              [Q(0.5), Q(0.9), Q(0.99), lists:last(Sorted), Rounds * Runs]),
    Payload = binary:copy(<<"x">>, 100),
    T0 = erlang:monotonic_time(nanosecond),
    [{sink, Node} ! Payload || _ <- lists:seq(1, Count)],
    {sink, Node} ! {count, self()},
    receive {counted, Count} -> ok end,
    T1 = erlang:monotonic_time(nanosecond),
    io:format("oneway per_op_ns=~.3f ops=~p~n", [(T1 - T0) / Count, Count]),
    halt(0).

%% Per-operation nanoseconds of each batch of round trips, after a warm-up.
run(Echo, Rounds, Warmup, Batch) ->
    trips(Echo, Warmup),
    [begin
         T0 = erlang:monotonic_time(nanosecond),
         trips(Echo, Batch),
         (erlang:monotonic_time(nanosecond) - T0) / Batch
     end || _ <- lists:seq(1, max(1, Rounds div Batch))].

trips(_, 0) -> ok;
trips(Echo, N) ->
    Echo ! {self(), N},
    receive {_, N} -> ok end,
    trips(Echo, N - 1).
