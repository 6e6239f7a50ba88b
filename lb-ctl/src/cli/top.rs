//! `lb-ctl top`: a live terminal view of the rates `stats --watch` prints (the same
//! computation, `cli::rates`), with each backend's health, redrawn every interval until `q`.
use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders, Row, Table};

use super::rates::{self, Rate, Rates, human};
use crate::api::client::{Client, ClientError};
use crate::api::types::BackendView;

/// What one screen shows.
pub struct View {
    pub title: String,
    pub rates: Rates,
    /// Health and state of each backend, by the name `stats` gives it (`VIP ADDRESS`).
    pub backends: Vec<(String, String)>,
}

/// Runs the view until `q`, Esc or Ctrl-C. The terminal is restored on every way out.
pub fn run(client: &Client, runtime: &tokio::runtime::Runtime, interval: Duration) -> Result<(), ClientError> {
    let mut before = runtime.block_on(client.stats())?;
    let mut read_at = Instant::now();
    let mut terminal = ratatui::try_init().map_err(|e| ClientError::Protocol(format!("terminal: {e}")))?;
    let result = (|| loop {
        // Wait out the interval, answering keys at once.
        let deadline = read_at + interval;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if event::poll(left).map_err(|e| ClientError::Protocol(format!("terminal: {e}")))?
                && let Ok(Event::Key(key)) = event::read()
                && (matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL)))
            {
                return Ok(());
            }
        }
        let after = runtime.block_on(client.stats())?;
        let now = Instant::now();
        let backends = runtime.block_on(client.backends(None))?;
        let view = View {
            title: format!(
                " lb-ctl top: {} (every {:.1} s, q quits) ",
                client.socket().display(),
                interval.as_secs_f64()
            ),
            rates: rates::rates(&before, &after, now.duration_since(read_at).as_secs_f64()),
            backends: health_by_name(&backends),
        };
        terminal.draw(|frame| draw(frame, &view)).map_err(|e| ClientError::Protocol(format!("terminal: {e}")))?;
        (before, read_at) = (after, now);
    })();
    ratatui::restore();
    result
}

fn health_by_name(list: &[BackendView]) -> Vec<(String, String)> {
    list.iter().map(|b| (format!("{} {}", b.vip, b.address), format!("{} {}", b.health.as_str(), b.state))).collect()
}

/// Draws one screen: VIPs, backends with health, CPUs, drops.
pub fn draw(frame: &mut Frame, view: &View) {
    let r = &view.rates;
    let [vips, backends, bottom] = Layout::vertical([
        Constraint::Length(r.vips.len() as u16 + 3),
        Constraint::Min(r.backends.len().min(4) as u16 + 3),
        Constraint::Length(r.cpus.len().max(r.drops.len()).max(1) as u16 + 3),
    ])
    .areas(frame.area());
    let [cpus, drops] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(bottom);
    let header = |cells: &[&'static str]| Row::new(cells.to_vec()).style(Style::new().add_modifier(Modifier::BOLD));
    let block = |title: String| Block::new().borders(Borders::ALL).title(title);
    let or_dash = |x: Option<f64>| x.map_or_else(|| "-".to_string(), human);
    let rate_cells = |v: &Rate| vec![human(v.pps), human(v.bps), or_dash(v.rps), or_dash(v.errors_per_sec)];

    let rows = r.vips.iter().map(|v| {
        let mut cells = vec![v.name.clone()];
        cells.extend(rate_cells(v));
        Row::new(cells)
    });
    let widths = columns(&[], 4);
    frame.render_widget(
        Table::new(rows, widths)
            .header(header(&["VIP", "PPS", "BPS", "REQ/S", "ERR/S"]))
            .block(block(view.title.clone())),
        vips,
    );

    let rows = r.backends.iter().map(|b| {
        let health = view.backends.iter().find(|(name, _)| *name == b.name).map_or("-", |(_, h)| h.as_str());
        let mut cells = vec![b.name.clone(), health.to_string()];
        cells.extend(rate_cells(b));
        Row::new(cells)
    });
    let widths = columns(&[Constraint::Length(18)], 4);
    frame.render_widget(
        Table::new(rows, widths)
            .header(header(&["BACKEND", "HEALTH", "PPS", "BPS", "REQ/S", "ERR/S"]))
            .block(block(" backends ".into())),
        backends,
    );

    let rows = r.cpus.iter().map(|c| Row::new(vec![c.name.clone(), human(c.pps), human(c.bps)]));
    let widths = columns(&[], 2);
    frame.render_widget(
        Table::new(rows, widths).header(header(&["CPU", "PPS", "VIP BPS"])).block(block(" CPUs ".into())),
        cpus,
    );
    let rows = r.drops.iter().map(|d| Row::new(vec![d.reason.clone(), human(d.pps)]));
    let widths = columns(&[], 1);
    frame.render_widget(
        Table::new(rows, widths).header(header(&["DROP", "PPS"])).block(block(" drops (growing) ".into())),
        drops,
    );
}

/// A name column taking the room left, then `text` columns, then `numbers` rate columns.
fn columns(text: &[Constraint], numbers: usize) -> Vec<Constraint> {
    let mut widths = vec![Constraint::Fill(1)];
    widths.extend_from_slice(text);
    widths.extend(std::iter::repeat_n(Constraint::Length(9), numbers));
    widths
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::cli::rates::DropRate;

    #[test]
    fn the_screen_shows_rates_health_cpus_and_drops() {
        let rate =
            |name: &str, pps: f64| Rate { name: name.into(), pps, bps: pps * 800.0, rps: None, errors_per_sec: None };
        let view = View {
            title: " lb-ctl top ".into(),
            rates: Rates {
                seconds: 1.0,
                vips: vec![rate("web", 12_345.0)],
                backends: vec![rate("web 198.51.100.1:8080", 950.0)],
                cpus: vec![rate("cpu0", 20_000.0)],
                drops: vec![DropRate { reason: "drop_no_backend".into(), pps: 3.0 }],
            },
            backends: vec![("web 198.51.100.1:8080".into(), "up active".into())],
        };
        let mut terminal = Terminal::new(TestBackend::new(100, 20)).unwrap();
        terminal.draw(|frame| draw(frame, &view)).unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .chunks(100)
            .map(|line| line.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        for want in
            ["web", "12.3k", "9.88M", "198.51.100.1:8080", "up active", "950", "cpu0", "20.0k", "drop_no_backend"]
        {
            assert!(screen.contains(want), "{want:?} not on screen:\n{screen}");
        }
    }
}
