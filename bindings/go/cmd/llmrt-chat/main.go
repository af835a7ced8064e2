// Command llmrt-chat generates text with llmrt from Go: a continuation of -prompt, or, without
// -prompt, a chat read line by line from standard input. Tokens are printed as they come;
// Ctrl-C stops the generation in progress (and exits when no generation runs).
//
//	go run ./cmd/llmrt-chat -model ../../models/kimi-k2-kjv-tiny -prompt "In the beginning" -max-tokens 24
//	echo "Who made the heaven?" | go run ./cmd/llmrt-chat -model ../../models/kimi-k2-kjv-tiny
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"llmrt"
)

func main() {
	model := flag.String("model", "", "model directory (a Hugging Face checkpoint)")
	prompt := flag.String("prompt", "", "text to continue; without it, chat with messages read from stdin")
	system := flag.String("system", "", "system message of the chat")
	maxTokens := flag.Uint("max-tokens", 64, "most tokens per reply (0: until a stop token or the context ends)")
	temperature := flag.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := flag.Int("top-k", 0, "top-k sampling (0: off)")
	topP := flag.Float64("top-p", 1, "top-p sampling (1: off)")
	seed := flag.Uint64("seed", 0, "random seed of the sampler")
	threads := flag.Int("threads", 0, "CPU worker threads (0: one per core)")
	flag.Parse()
	if *model == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: llmrt-chat -model DIR [-prompt TEXT] [-system TEXT] [-max-tokens N] [-temperature T] [-top-k K] [-top-p P] [-seed S]")
		os.Exit(2)
	}
	if err := run(*model, *prompt, *system, llmrt.SamplingOptions{
		Temperature: float32(*temperature), TopK: int32(*topK), TopP: float32(*topP),
		MaxNewTokens: uint32(*maxTokens), Seed: *seed,
	}, *threads); err != nil {
		if errors.Is(err, context.Canceled) {
			os.Exit(130) // interrupted: the shell's code for SIGINT
		}
		fmt.Fprintln(os.Stderr, "llmrt-chat:", err)
		os.Exit(1)
	}
}

func run(model, prompt, system string, opts llmrt.SamplingOptions, threads int) error {
	rt, err := llmrt.NewRuntime(model, &llmrt.RuntimeOptions{NumThreads: threads})
	if err != nil {
		return err
	}
	defer rt.Close()
	info, err := rt.Info()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "llmrt-chat: %s (%s), %d parameters, llmrt %s\n",
		info.Architecture, info.ModelType, info.NumParameters, llmrt.Version())

	if prompt != "" {
		fmt.Print(prompt) // the continuation follows the prompt, as llm-run prints it
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		ts, err := rt.GenerateStream(ctx, prompt, opts)
		if err != nil {
			return err
		}
		_, err = print(ts)
		return err
	}

	var messages []llmrt.ChatMessage
	if system != "" {
		messages = append(messages, llmrt.ChatMessage{Role: "system", Content: system})
	}
	in := bufio.NewScanner(os.Stdin)
	for {
		fmt.Fprint(os.Stderr, "> ")
		if !in.Scan() {
			fmt.Fprintln(os.Stderr)
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		messages = append(messages, llmrt.ChatMessage{Role: "user", Content: line})
		// Ctrl-C stops this reply only; between replies it exits as usual.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		ts, err := rt.ChatStream(ctx, messages, opts)
		if err != nil {
			stop()
			return err
		}
		reply, err := print(ts)
		stop()
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		messages = append(messages, llmrt.ChatMessage{Role: "assistant", Content: reply})
	}
}

// print writes a stream's text as it comes and returns all of it.
func print(ts *llmrt.TokenStream) (string, error) {
	defer ts.Close()
	var all strings.Builder
	for ts.Next() {
		piece := ts.Token().Text
		all.WriteString(piece)
		fmt.Print(piece)
	}
	fmt.Println()
	if ts.FinishReason() == llmrt.FinishCancelled {
		fmt.Fprintln(os.Stderr, "llmrt-chat: stopped")
	}
	return all.String(), ts.Err()
}
