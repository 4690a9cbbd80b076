// Command trialog-actors serves actor implementations of a Trialog spec from Go.
//
//	trialog-actors --schemas schemas --serve go_counter=rps-counter --serve go_cook=overcooked-cook
//
// Each --serve IMPL=AGENT plays the spec's (external) implementation IMPL with one of
// the example agents, as the consumer group actors.IMPL. Connection: --brokers or
// TRIALOG_BOOTSTRAP_SERVERS, --topic-prefix or TRIALOG_TOPIC_PREFIX.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/trialog/trialog/sdk/go/examples"
	"github.com/trialog/trialog/sdk/go/trialog"
)

func main() {
	f := trialog.ConfigFromFlags(flag.CommandLine,
		"keyring file (default: TRIALOG_KEY_ACTORS_<IMPL>, else the development keyring for a local broker)",
		"IMPL=AGENT: play implementation IMPL with AGENT (repeatable)")
	seat := flag.String("seat", "", "AGENT: play the client seat of the join token in TRIALOG_JOIN_TOKEN with AGENT")
	holder := flag.String("holder", trialog.EnvOr("TRIALOG_HOLDER", fmt.Sprintf("go-%d", os.Getpid())), "this client's holder id (keep it to resume the seat)")
	flag.Parse()
	if len(f.Serve) == 0 && *seat == "" {
		fmt.Fprintf(os.Stderr, "trialog-actors: nothing to serve: pass --serve IMPL=AGENT or --seat AGENT (agents: %s)\n", trialog.Choices(examples.Agents))
		os.Exit(2)
	}
	store, err := trialog.LoadDir(f.Schemas)
	if err != nil {
		log.Fatalf("trialog-actors: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *seat != "" {
		factory, ok := examples.Agents[*seat]
		if !ok {
			log.Fatalf("trialog-actors: --seat %q: AGENT is one of %s", *seat, trialog.Choices(examples.Agents))
		}
		s, key, err := trialog.ParseJoinToken(os.Getenv("TRIALOG_JOIN_TOKEN"), *holder)
		if err != nil {
			log.Fatalf("trialog-actors: TRIALOG_JOIN_TOKEN: %v", err)
		}
		cfg := trialog.Config{Brokers: f.BrokerList(), TopicPrefix: f.TopicPrefix, Seat: s, Store: store, Key: key, NewAgent: factory}
		if err := trialog.Run(ctx, cfg); err != nil {
			log.Fatalf("trialog-actors: %v", err)
		}
		return
	}
	services := trialog.NewServiceGroup(ctx, stop, "trialog-actors")
	for _, s := range f.Serve {
		impl, factory, err := trialog.ServeChoice(s, "AGENT", examples.Agents)
		if err != nil {
			log.Fatalf("trialog-actors: %v", err)
		}
		key, err := trialog.LoadActorKey(impl, f.Keyring, f.BrokerList())
		if err != nil {
			log.Fatalf("trialog-actors: %v", err)
		}
		cfg := trialog.Config{Brokers: f.BrokerList(), TopicPrefix: f.TopicPrefix, Implementation: impl, Store: store, Key: key, NewAgent: factory}
		services.Go(impl, func(ctx context.Context) error { return trialog.Run(ctx, cfg) })
	}
	services.Wait()
}
