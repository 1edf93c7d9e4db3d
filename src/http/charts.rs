//! The dashboard's charts as inline SVG, drawn on the server (no script): stacked
//! bars with a y scale and labelled x axis, each with a title and description for
//! screen readers and a table of the same numbers beside it.

use maud::{Markup, html};

use crate::desk::Series;

/// One stacked part of every bar: its name and colour.
struct Part {
    name: &'static str,
    colour: &'static str,
}

const PROCESSED: Part = Part::new("processed", "#3a9a3a");
const FAILED: Part = Part::new("failed", "#e0a020");
const DEAD: Part = Part::new("dead", "#c83232");
const REJECTED: Part = Part::new("rejected signatures", "#7a4fb5");

impl Part {
    const fn new(name: &'static str, colour: &'static str) -> Part {
        Part { name, colour }
    }
}

/// A chart: its bars (a label, shown when `shown`, and one value per part).
struct Chart<'a> {
    id: &'a str,
    title: &'a str,
    parts: &'a [Part],
    bars: Vec<Bar>,
}

struct Bar {
    label: String,
    shown: bool,
    values: Vec<i64>,
}

// The drawing's size in its own units (the page scales it to the column).
const WIDTH: i64 = 640;
const HEIGHT: i64 = 220;
const LEFT: i64 = 48;
const BOTTOM: i64 = 22;
const TOP: i64 = 10;
const TICKS: i64 = 4;

/// The smallest step of 1, 2 or 5 times a power of ten with `TICKS` steps
/// reaching `max` (at least 1).
fn tick_step(max: i64) -> i64 {
    let need = (max + TICKS - 1) / TICKS;
    let mut power = 1i64;
    loop {
        for factor in [1, 2, 5] {
            if factor * power >= need {
                return factor * power;
            }
        }
        power = power.saturating_mul(10);
    }
}

fn draw(chart: &Chart<'_>) -> Markup {
    let max = chart
        .bars
        .iter()
        .map(|b| b.values.iter().sum::<i64>())
        .max()
        .unwrap_or(0);
    let step = tick_step(max.max(1));
    let top_value = step * TICKS;
    let plot_height = HEIGHT - TOP - BOTTOM;
    let y = |value: i64| HEIGHT - BOTTOM - value * plot_height / top_value;
    let slot = (WIDTH - LEFT) / i64::try_from(chart.bars.len().max(1)).unwrap_or(1);
    let bar_width = (slot * 3 / 4).max(1);
    let total: i64 = chart.bars.iter().flat_map(|b| &b.values).sum();
    let parts: Vec<&str> = chart.parts.iter().map(|p| p.name).collect();
    let title_id = format!("{}-title", chart.id);
    let desc_id = format!("{}-desc", chart.id);
    let description = format!(
        "Stacked bars, one per {}: {}. Highest bar {max}, {total} in all; the table below \
         lists every value.",
        if chart.bars.len() > 7 { "hour" } else { "day" },
        parts.join(", ")
    );
    html! {
        figure.chart id=(chart.id) {
            h3 { (chart.title) }
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {HEIGHT}"))
                role="img" aria-labelledby=(format!("{title_id} {desc_id}")) {
                title id=(title_id) { (chart.title) }
                desc id=(desc_id) { (description) }
                @for tick in 0..=TICKS {
                    @let value = tick * step;
                    line x1=(LEFT) x2=(WIDTH) y1=(y(value)) y2=(y(value)) stroke="#ddd" {}
                    text x=(LEFT - 6) y=(y(value) + 4) text-anchor="end" font-size="11" fill="#555" { (value) }
                }
                @for (i, bar) in chart.bars.iter().enumerate() {
                    @let x = LEFT + i64::try_from(i).unwrap_or(0) * slot + (slot - bar_width) / 2;
                    g {
                        title { (bar.label) ": " (summary(&parts, &bar.values)) }
                        @for (colour, from, to) in stacked(chart.parts, &bar.values) {
                            rect x=(x) y=(y(to)) width=(bar_width)
                                height=((y(from) - y(to)).max(1)) fill=(colour) {}
                        }
                    }
                    @if bar.shown {
                        text x=(x + bar_width / 2) y=(HEIGHT - 6) text-anchor="middle" font-size="11" fill="#555" { (bar.label) }
                    }
                }
                line x1=(LEFT) x2=(WIDTH) y1=(HEIGHT - BOTTOM) y2=(HEIGHT - BOTTOM) stroke="#888" {}
            }
            figcaption.legend {
                @for part in chart.parts {
                    span { span.swatch style=(format!("background:{}", part.colour)) {} (part.name) }
                }
            }
            details {
                summary { "The numbers" }
                table {
                    tr { th { "" } @for part in chart.parts { th { (part.name) } } }
                    @for bar in &chart.bars {
                        tr { th { (bar.label) } @for value in &bar.values { td { (value) } } }
                    }
                }
            }
        }
    }
}

/// Each non-zero part of a bar: its colour and the values it spans.
fn stacked(parts: &[Part], values: &[i64]) -> Vec<(&'static str, i64, i64)> {
    let mut base = 0;
    let mut spans = Vec::new();
    for (part, value) in parts.iter().zip(values) {
        if *value > 0 {
            spans.push((part.colour, base, base + value));
        }
        base += value;
    }
    spans
}

fn summary(parts: &[&str], values: &[i64]) -> String {
    parts
        .iter()
        .zip(values)
        .map(|(name, value)| format!("{value} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Deliveries per hour of the last day and failures per day of the last week.
pub fn charts(series: &Series) -> Markup {
    let hours = Chart {
        id: "chart-hours",
        title: "Events per hour, last 24 hours (UTC)",
        parts: &[PROCESSED, FAILED, DEAD, REJECTED],
        bars: series
            .hours
            .iter()
            .enumerate()
            .map(|(i, h)| Bar {
                label: h.start.format("%H:00").to_string(),
                // Every third hour, and the current one.
                shown: i % 3 == 2 || i + 1 == series.hours.len(),
                values: vec![h.processed, h.failed, h.dead, h.rejected_signatures],
            })
            .collect(),
    };
    let days = Chart {
        id: "chart-days",
        title: "Failed and dead events per day, last 7 days (UTC)",
        parts: &[FAILED, DEAD],
        bars: series
            .days
            .iter()
            .map(|d| Bar {
                label: d.start.format("%a %d").to_string(),
                shown: true,
                values: vec![d.failed, d.dead],
            })
            .collect(),
    };
    html! {
        div.charts { (draw(&hours)) (draw(&days)) }
    }
}

#[cfg(test)]
mod tests {
    use super::tick_step;

    #[test]
    fn the_scale_reaches_the_highest_bar_in_round_steps() {
        assert_eq!(tick_step(1), 1);
        assert_eq!(tick_step(4), 1);
        assert_eq!(tick_step(5), 2);
        assert_eq!(tick_step(37), 10);
        assert_eq!(tick_step(35_000), 10_000);
        assert_eq!(tick_step(41_000), 20_000);
    }
}
