//! A small chat / generate CLI over llmrt.
//!
//!   cargo run --offline --example chat -- --generate "In the beginning" --max-tokens 24
//!   cargo run --offline --example chat -- --prompt "Who made the heaven?"
//!   cargo run --offline --example chat            # a conversation: one user line per turn
//!
//! Options: --model DIR (default: the shipped models/kimi-k2-kjv-tiny), --system TEXT,
//! --max-tokens N (default 64), --temperature T, --seed S. Tokens are printed as they come.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use llmrt::{ChatMessage, Runtime, RuntimeOptions, Sampling, Session, Tokenizer};

struct Args {
    model: PathBuf,
    generate: Option<String>,
    prompt: Option<String>,
    system: Option<String>,
    max_tokens: u32,
    temperature: f32,
    seed: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        model: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/kimi-k2-kjv-tiny"),
        generate: None,
        prompt: None,
        system: None,
        max_tokens: 64,
        temperature: 0.0,
        seed: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => args.model = PathBuf::from(value()?),
            "--generate" => args.generate = Some(value()?),
            "--prompt" => args.prompt = Some(value()?),
            "--system" => args.system = Some(value()?),
            "--max-tokens" => args.max_tokens = value()?.parse().map_err(|e| format!("--max-tokens: {e}"))?,
            "--temperature" => args.temperature = value()?.parse().map_err(|e| format!("--temperature: {e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "-h" | "--help" => {
                return Err("usage: chat [--model DIR] [--generate TEXT | --prompt TEXT] [--system TEXT] \
                            [--max-tokens N] [--temperature T] [--seed S]"
                    .into())
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

/// Streams the session's generation to stdout and returns its text.
fn print_stream(session: &Session<'_>, tok: &Tokenizer) -> llmrt::Result<String> {
    let mut text = String::new();
    let mut out = std::io::stdout().lock();
    let mut stream = session.stream(tok)?;
    for chunk in stream.by_ref() {
        let chunk = chunk?;
        let _ = out.write_all(chunk.text.as_bytes()).and_then(|_| out.flush());
        text.push_str(&chunk.text);
    }
    let _ = writeln!(out);
    eprintln!("[{} tokens, {:?}]", session.info()?.num_generated, stream.finish_reason());
    Ok(text)
}

fn run(args: Args) -> llmrt::Result<()> {
    let rt = Runtime::new(&args.model, &RuntimeOptions::default())?;
    let tok = Tokenizer::new(&args.model)?;
    let info = rt.info()?;
    eprintln!("loaded {} ({}), {} parameters", info.architecture, info.model_type, info.num_parameters);
    let sampling = Sampling { max_new_tokens: args.max_tokens, ..Sampling::temperature(args.temperature, args.seed) };

    if let Some(text) = &args.generate {
        let ids = tok.encode(text, false)?;
        let eos = tok.info()?.eos_id;
        let session = rt.create_session(&sampling.clone().with_stop_tokens(eos))?;
        session.append_tokens(&ids)?;
        print!("{text}");
        print_stream(&session, &tok)?;
        return Ok(());
    }

    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage::system(system.clone()));
    }
    let stops = tok.chat_stop_tokens()?;
    let turn = |messages: &mut Vec<ChatMessage>, user: String| -> llmrt::Result<()> {
        messages.push(ChatMessage::user(user));
        // The whole conversation each turn: prefix sharing reuses the KV pages of the earlier
        // turns' common prefix.
        let session = rt.create_session(&sampling.clone().with_stop_tokens(stops.iter().copied()))?;
        session.append_tokens(&llmrt::chat_prompt(&tok, messages)?)?;
        let reply = print_stream(&session, &tok)?;
        messages.push(ChatMessage::assistant(reply));
        Ok(())
    };
    if let Some(prompt) = args.prompt.clone() {
        return turn(&mut messages, prompt);
    }
    eprintln!("one line per turn; end with Ctrl-D");
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| llmrt::Error::new(llmrt::Status::Io, format!("stdin: {e}")))?;
        if !line.trim().is_empty() {
            turn(&mut messages, line)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("chat: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat: {e}");
            ExitCode::FAILURE
        }
    }
}
