pub fn run() -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
